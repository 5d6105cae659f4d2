//! i-quant x Q8 integer dot products, bit-exact with ggml's
//! `ggml_vec_dot_iq*_q8_K_generic` (and `..._iq4_nl_q8_0_generic`).
//!
//! ggml multiplies i-quant weights by activations quantized to Q8_K (Q8_0
//! for IQ4_NL): integer sums per sub-block, scaled once per block in f32.
//! These are the scalar references of that path, with ggml's operation order
//! and no fused multiply-add.

use super::grids::{
    IQ1M_DELTA, IQ1S_DELTA, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID,
    KSIGNS_IQ2XS, KVALUES_IQ4NL,
};
use super::iq1::{IQ1_M_BYTES, IQ1_S_BYTES};
use super::iq2::{IQ2_S_BYTES, IQ2_XS_BYTES, IQ2_XXS_BYTES};
use super::iq3::{IQ3_S_BYTES, IQ3_XXS_BYTES};
use super::iq4::{IQ4_NL_BYTES, IQ4_XS_BYTES, QK4_NL};
use super::{f16_at, u16_at, u32_at, QK_K};
use crate::Error;
use anedvd_base::GgmlType;

/// Bytes of one Q8_K block: `d: f32, qs: [i8; 256], bsums: [i16; 16]`.
const Q8K_BYTES: usize = 4 + QK_K + 2 * QK_K / 16;
/// Bytes of one Q8_0 block: `d: f16, qs: [i8; 32]`.
const Q8_0_BYTES: usize = 2 + 32;

/// The activation type ggml quantizes to for `ty`'s dot product
/// (`vec_dot_type`); `None` if `ty` is not an i-quant.
#[allow(dead_code)] // Not yet wired into lib.rs's public API.
pub(crate) fn vec_dot_type(ty: GgmlType) -> Option<GgmlType> {
    match ty {
        GgmlType::IQ4NL => Some(GgmlType::Q8_0),
        GgmlType::IQ1S
        | GgmlType::IQ1M
        | GgmlType::IQ2XXS
        | GgmlType::IQ2XS
        | GgmlType::IQ2S
        | GgmlType::IQ3XXS
        | GgmlType::IQ3S
        | GgmlType::IQ4XS => Some(GgmlType::Q8K),
        _ => None,
    }
}

/// Dot product of a row of i-quant weights `w` with a row of activations
/// `act` of type [`vec_dot_type`]`(ty)` holding as many elements, as ggml's
/// CPU backend computes it; `None` if `ty` is not an i-quant.
///
/// `w` must be a whole number of blocks and `act` exactly as long as its
/// elements need, otherwise [`Error::BadLength`].
#[allow(dead_code)] // Not yet wired into lib.rs's public API.
pub(crate) fn vec_dot_q8(ty: GgmlType, w: &[u8], act: &[u8]) -> Option<Result<f32, Error>> {
    let act_ty = vec_dot_type(ty)?;
    let (bb, qk) = (ty.block_bytes() as usize, ty.block_size() as usize);
    if !w.len().is_multiple_of(bb) {
        return Some(Err(Error::BadLength {
            ty,
            what: format!(
                "weights of {} bytes are not whole {bb}-byte blocks",
                w.len()
            ),
        }));
    }
    let elements = w.len() / bb * qk;
    if let Err(e) = super::check_len(act_ty, act.len(), elements) {
        return Some(Err(Error::BadLength {
            ty,
            what: format!("{act_ty} activations for {elements} weights: {e}"),
        }));
    }
    Some(Ok(match ty {
        GgmlType::IQ1S => sum(w, act, iq1_s),
        GgmlType::IQ1M => sum(w, act, iq1_m),
        GgmlType::IQ2XXS => 0.125 * sum(w, act, iq2_xxs),
        GgmlType::IQ2XS => 0.125 * sum(w, act, iq2_xs),
        GgmlType::IQ2S => 0.125 * sum(w, act, iq2_s),
        GgmlType::IQ3XXS => 0.25 * sum(w, act, iq3_xxs),
        GgmlType::IQ3S => sum(w, act, iq3_s),
        GgmlType::IQ4NL => sum(w, act, iq4_nl),
        _ => sum(w, act, iq4_xs),
    }))
}

/// Folds `f(sumf, weight block, activation block)` over the blocks in order.
fn sum<const B: usize, const A: usize>(
    w: &[u8],
    act: &[u8],
    f: fn(f32, &[u8; B], &Q8<'_, A>) -> f32,
) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(B).zip(act.chunks_exact(A)) {
        // Both conversions always succeed: chunks_exact yields exact lengths.
        if let (Ok(x), Ok(y)) = (<&[u8; B]>::try_from(x), <&[u8; A]>::try_from(y)) {
            sumf = f(sumf, x, &Q8(y));
        }
    }
    sumf
}

/// A Q8_K (`A` = 292) or Q8_0 (`A` = 34) activation block.
struct Q8<'a, const A: usize>(&'a [u8; A]);

impl Q8<'_, Q8K_BYTES> {
    /// The f32 scale.
    fn d(&self) -> f32 {
        f32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }
    /// Quant `i` as an `i32`.
    fn q(&self, i: usize) -> i32 {
        i32::from(self.0[4 + i] as i8)
    }
    /// Stored sum of quants `16 * k .. 16 * k + 16`.
    fn bsum(&self, k: usize) -> i32 {
        i32::from(u16_at(self.0, 4 + QK_K + 2 * k) as i16)
    }
}

impl Q8<'_, Q8_0_BYTES> {
    /// Quant `i` as an `i32`.
    fn q(&self, i: usize) -> i32 {
        i32::from(self.0[2 + i] as i8)
    }
}

/// `sum_j grid[j] * q8[j] * sign_j` over one 8-element group (`off` = first quant).
fn signed8(y: &Q8<'_, Q8K_BYTES>, off: usize, grid: [u8; 8], signs: u8) -> i32 {
    let mut s = 0;
    for (j, g) in grid.into_iter().enumerate() {
        let sign = if signs & (1 << j) != 0 { -1 } else { 1 };
        s += i32::from(g) * y.q(off + j) * sign;
    }
    s
}

/// Two 4-byte grid points as one 8-byte group.
fn pair(grid1: u32, grid2: u32) -> [u8; 8] {
    let (a, b) = (grid1.to_le_bytes(), grid2.to_le_bytes());
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
}

/// `ggml_vec_dot_iq2_xxs_q8_K_generic`, one block (before the final `0.125 *`).
fn iq2_xxs(sumf: f32, x: &[u8; IQ2_XXS_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let d = f16_at(x, 0) * y.d();
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let at = 2 + 8 * ib32;
        let aux1 = u32_at(x, at + 4);
        let ls = 2 * (aux1 >> 28) as i32 + 1;
        let mut sumi = 0;
        for l in 0..4 {
            let grid = IQ2XXS_GRID[usize::from(x[at + l])].to_le_bytes();
            let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
            sumi += signed8(y, 32 * ib32 + 8 * l, grid, signs);
        }
        bsum += sumi * ls;
    }
    sumf + d * bsum as f32
}

/// `ggml_vec_dot_iq2_xs_q8_K_generic`, one block (before the final `0.125 *`).
fn iq2_xs(sumf: f32, x: &[u8; IQ2_XS_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let d = f16_at(x, 0) * y.d();
    let scales = &x[2 + QK_K / 4..];
    let mut bsum = 0i32;
    for (ib32, &sc) in scales.iter().enumerate() {
        for (half, ls) in [sc & 0xf, sc >> 4].into_iter().enumerate() {
            let mut sumi = 0;
            for l in 2 * half..2 * half + 2 {
                let q = u16_at(x, 2 + 2 * (4 * ib32 + l));
                let grid = IQ2XS_GRID[usize::from(q & 511)].to_le_bytes();
                let signs = KSIGNS_IQ2XS[usize::from(q >> 9)];
                sumi += signed8(y, 32 * ib32 + 8 * l, grid, signs);
            }
            bsum += sumi * (2 * i32::from(ls) + 1);
        }
    }
    sumf + d * bsum as f32
}

/// `ggml_vec_dot_iq2_s_q8_K_generic`, one block (before the final `0.125 *`).
fn iq2_s(sumf: f32, x: &[u8; IQ2_S_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let d = f16_at(x, 0) * y.d();
    let qs = &x[2..2 + QK_K / 8];
    let signs = &x[2 + QK_K / 8..2 + QK_K / 4];
    let qh = &x[2 + QK_K / 4..2 + QK_K / 4 + QK_K / 32];
    let scales = &x[2 + QK_K / 4 + QK_K / 32..];
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let ls = [scales[ib32] & 0xf, scales[ib32] >> 4].map(|s| 1 + 2 * i32::from(s));
        let mut sumi = [0i32; 2];
        for l in 0..4 {
            let hi = (usize::from(qh[ib32]) << (8 - 2 * l)) & 0x300;
            let grid = IQ2S_GRID[usize::from(qs[4 * ib32 + l]) | hi].to_le_bytes();
            sumi[l / 2] += signed8(y, 32 * ib32 + 8 * l, grid, signs[4 * ib32 + l]);
        }
        bsum += ls[0] * sumi[0] + ls[1] * sumi[1];
    }
    sumf + d * bsum as f32
}

/// `ggml_vec_dot_iq3_xxs_q8_K_generic`, one block (before the final `0.25 *`).
fn iq3_xxs(sumf: f32, x: &[u8; IQ3_XXS_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let d = f16_at(x, 0) * y.d();
    let q3 = &x[2..2 + QK_K / 4];
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let aux = u32_at(x, 2 + QK_K / 4 + 4 * ib32);
        let ls = 2 * (aux >> 28) as i32 + 1;
        let mut sumi = 0;
        for l in 0..4 {
            let grid1 = IQ3XXS_GRID[usize::from(q3[8 * ib32 + 2 * l])];
            let grid2 = IQ3XXS_GRID[usize::from(q3[8 * ib32 + 2 * l + 1])];
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            sumi += signed8(y, 32 * ib32 + 8 * l, pair(grid1, grid2), signs);
        }
        bsum += sumi * ls;
    }
    sumf + d * bsum as f32
}

/// `ggml_vec_dot_iq3_s_q8_K_generic`, one block.
fn iq3_s(sumf: f32, x: &[u8; IQ3_S_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let d = f16_at(x, 0) * y.d();
    let qs = &x[2..2 + QK_K / 4];
    let qh = &x[2 + QK_K / 4..2 + QK_K / 4 + QK_K / 32];
    let signs = &x[2 + QK_K / 4 + QK_K / 32..2 + QK_K / 4 + QK_K / 32 + QK_K / 8];
    let scales = &x[IQ3_S_BYTES - QK_K / 64..];
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let ls = 2 * i32::from((scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xf) + 1;
        let h = usize::from(qh[ib32]);
        let mut sumi = 0;
        for l in 0..4 {
            let q = 8 * ib32 + 2 * l;
            let grid1 = IQ3S_GRID[usize::from(qs[q]) | ((h << (8 - 2 * l)) & 256)];
            let grid2 = IQ3S_GRID[usize::from(qs[q + 1]) | ((h << (7 - 2 * l)) & 256)];
            sumi += signed8(
                y,
                32 * ib32 + 8 * l,
                pair(grid1, grid2),
                signs[4 * ib32 + l],
            );
        }
        bsum += sumi * ls;
    }
    sumf + d * bsum as f32
}

/// `sum_j grid[j] * q8[j]` for IQ1 grid point `idx`, 8 quants from `off`.
fn ternary8(y: &Q8<'_, Q8K_BYTES>, off: usize, idx: usize) -> i32 {
    let grid = IQ1S_GRID[idx].to_le_bytes();
    grid.into_iter()
        .enumerate()
        .map(|(j, g)| y.q(off + j) * i32::from(g as i8))
        .sum()
}

/// `ggml_vec_dot_iq1_s_q8_K_generic`, one block.
fn iq1_s(sumf: f32, x: &[u8; IQ1_S_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let qs = &x[2..2 + QK_K / 8];
    let (mut sumi, mut sumi1) = (0i32, 0i32);
    for ib in 0..QK_K / 32 {
        let qh = u16_at(x, 2 + QK_K / 8 + 2 * ib);
        let ls = 2 * i32::from((qh >> 12) & 7) + 1;
        let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
        let mut lsum = 0;
        for l in 0..4 {
            let idx = usize::from(qs[4 * ib + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
            lsum += ternary8(y, 32 * ib + 8 * l, idx);
        }
        sumi += ls * lsum;
        sumi1 += ls * delta * (y.bsum(2 * ib) + y.bsum(2 * ib + 1));
    }
    sumf + f16_at(x, 0) * y.d() * (sumi as f32 + IQ1S_DELTA * sumi1 as f32)
}

/// `ggml_vec_dot_iq1_m_q8_K_generic`, one block.
fn iq1_m(sumf: f32, x: &[u8; IQ1_M_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let qs = &x[..QK_K / 8];
    let qh = &x[QK_K / 8..QK_K / 8 + QK_K / 16];
    let sc_at = QK_K / 8 + QK_K / 16;
    let sc = [0, 1, 2, 3].map(|k| u16_at(x, sc_at + 2 * k));
    let scale =
        (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let (mut sumi1, mut sumi2) = (0i32, 0i32);
    for ib in 0..QK_K / 32 {
        let (mut sum1, mut sum2) = ([0i32; 2], [0i32; 2]);
        for l in 0..4 {
            let h = u16::from(qh[2 * ib + l / 2]);
            let delta = if h & (0x08 << (4 * (l % 2))) != 0 {
                -1
            } else {
                1
            };
            let idx = usize::from(qs[4 * ib + l]) | usize::from((h << (8 - 4 * (l % 2))) & 0x700);
            let off = 32 * ib + 8 * l;
            sum1[l / 2] += ternary8(y, off, idx);
            sum2[l / 2] += (0..8).map(|j| y.q(off + j)).sum::<i32>() * delta;
        }
        let s = sc[ib / 2] >> (6 * (ib % 2));
        let ls1 = 2 * i32::from(s & 0x7) + 1;
        let ls2 = 2 * i32::from((s >> 3) & 0x7) + 1;
        sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
        sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
    }
    let d = half::f16::from_bits(scale).to_f32();
    sumf + d * y.d() * (sumi1 as f32 + IQ1M_DELTA * sumi2 as f32)
}

/// `sum_j q8[j] * kvalues[qs[j] & 0xf] + q8[j + 16] * kvalues[qs[j] >> 4]`.
fn nl32(qs: &[u8], q: impl Fn(usize) -> i32) -> i32 {
    let kv = |n: u8| i32::from(KVALUES_IQ4NL[usize::from(n & 0xf)]);
    let (mut sumi1, mut sumi2) = (0, 0);
    for (j, &b) in qs.iter().take(16).enumerate() {
        sumi1 += q(j) * kv(b);
        sumi2 += q(j + 16) * kv(b >> 4);
    }
    sumi1 + sumi2
}

/// `ggml_vec_dot_iq4_nl_q8_0_generic`, one block.
fn iq4_nl(sumf: f32, x: &[u8; IQ4_NL_BYTES], y: &Q8<'_, Q8_0_BYTES>) -> f32 {
    let d = f16_at(y.0, 0) * f16_at(x, 0);
    sumf + d * nl32(&x[2..2 + QK4_NL / 2], |i| y.q(i)) as f32
}

/// `ggml_vec_dot_iq4_xs_q8_K_generic`, one block.
fn iq4_xs(mut sumf: f32, x: &[u8; IQ4_XS_BYTES], y: &Q8<'_, Q8K_BYTES>) -> f32 {
    let d4d8 = f16_at(x, 0) * y.d();
    let scales_h = u16_at(x, 2);
    let scales_l = &x[4..4 + QK_K / 64];
    let qs = &x[4 + QK_K / 64..];
    for ib in 0..QK_K / 32 {
        let lo = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
        let hi = ((scales_h >> (2 * ib)) & 3) << 4;
        let ls = i32::from(lo) | i32::from(hi);
        let dl = d4d8 * (ls - 32) as f32;
        sumf += dl * nl32(&qs[16 * ib..], |i| y.q(32 * ib + i)) as f32;
    }
    sumf
}
