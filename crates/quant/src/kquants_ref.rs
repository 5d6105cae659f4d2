//! Reference k-quant quantizers (Q8_K, Q4_K, Q6_K), bit-exact with ggml's
//! `quantize_row_*_ref` (no importance matrix).

use crate::float::{f16_to_f32, f32_to_f16};
use crate::kquants::{get_scale_min_k4, QK_K};
use crate::util::{nearest_int, put_u16};

/// ggml's `GROUP_MAX_EPS`: below this a group counts as all-zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// One Q8_K block (the CPU backend's activation format): f32 scale, 256
/// signed 8-bit quants and the sums of each 16 quants (292 bytes on disk).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8K {
    /// Scale; element `j` is `d * qs[j]`.
    pub d: f32,
    /// The quants.
    pub qs: [i8; QK_K],
    /// `bsums[j] = sum(qs[16*j .. 16*j+16])`.
    pub bsums: [i16; QK_K / 16],
}

impl BlockQ8K {
    /// Bytes of one block in ggml layout.
    pub const BYTES: usize = 292;

    /// An all-zero block.
    pub const ZERO: Self = Self {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
    };

    /// Parses a block from its ggml byte layout.
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Self {
        let mut out = Self::ZERO;
        out.d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (q, &v) in out.qs.iter_mut().zip(&b[4..260]) {
            *q = v as i8;
        }
        for (s, c) in out.bsums.iter_mut().zip(b[260..].chunks_exact(2)) {
            *s = i16::from_le_bytes([c[0], c[1]]);
        }
        out
    }

    /// Serializes the block in ggml byte layout.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..4].copy_from_slice(&self.d.to_le_bytes());
        for (o, &q) in b[4..260].iter_mut().zip(&self.qs) {
            *o = q as u8;
        }
        for (c, s) in b[260..].chunks_exact_mut(2).zip(&self.bsums) {
            c.copy_from_slice(&s.to_le_bytes());
        }
        b
    }

    /// `quantize_row_q8_K_ref` for one block of 256 values.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (amax, max) = crate::legacy::signed_absmax(x);
        let mut out = Self::ZERO;
        if amax == 0.0 {
            return out;
        }
        let iscale = -127.0 / max;
        for (q, &v) in out.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, c) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
            *s = c.iter().map(|&q| q as i32).sum::<i32>() as i16;
        }
        out.d = 1.0 / iscale;
        out
    }
}

/// `quantize_row_q8_K_ref` into bytes.
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(BlockQ8K::BYTES))
    {
        let mut xa = [0.0f32; QK_K];
        xa.copy_from_slice(x);
        b.copy_from_slice(&BlockQ8K::quantize(&xa).to_bytes());
    }
}

/// ggml's `make_qkx2_quants`: asymmetric scale/min search for one group.
/// Returns `(scale, -min)`; `l` receives the levels.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min));
        l[i] = q.clamp(0, nmax) as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let w = weights[i];
            let lf = q as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `quantize_row_q4_K_ref`: Q4_K (144 bytes): d @0, dmin @2, scales[12] @4, qs[128] @16.
pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(144)) {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 32];
        let mut weights = [0.0f32; 32];
        let mut mins = [0.0f32; 8];
        let mut scales = [0.0f32; 8];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..8 {
            let xs = &x[32 * j..32 * j + 32];
            let mut sum_x2 = 0.0f32;
            for &v in xs {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / 32.0).sqrt();
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            let (s, m) = make_qkx2_quants(
                15,
                xs,
                &weights,
                &mut l[32 * j..32 * j + 32],
                &mut laux,
                -1.0,
                0.1,
                20,
                false,
            );
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let sc = &mut b[4..16];
        sc.fill(0);
        for j in 0..8 {
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            if j < 4 {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
                sc[j - 4] |= (ls >> 4) << 6;
                sc[j] |= (lm >> 4) << 6;
            }
        }
        let d16 = f32_to_f16(max_scale / 63.0);
        let dmin16 = f32_to_f16(max_min / 63.0);
        put_u16(b, 0, d16);
        put_u16(b, 2, dmin16);
        for j in 0..8 {
            let (s, m) = get_scale_min_k4(j, &b[4..16]);
            let d = f16_to_f32(d16) * s as f32;
            if d == 0.0 {
                continue;
            }
            let dm = f16_to_f32(dmin16) * m as f32;
            for ii in 0..32 {
                let q = nearest_int((x[32 * j + ii] + dm) / d);
                l[32 * j + ii] = q.clamp(0, 15) as u8;
            }
        }
        for (n, q) in b[16..144].chunks_exact_mut(32).enumerate() {
            for i in 0..32 {
                q[i] = l[64 * n + i] | (l[64 * n + i + 32] << 4);
            }
        }
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no weights: symmetric
/// scale search for one group of Q6_K. `l` receives levels offset by `nmax`.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l[..x.len()].fill(0);
        return 0.0;
    }
    let levels = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = levels(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in l.iter_mut().zip(x) {
        *o = (levels(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l.iter_mut().zip(x) {
                *o = (levels(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `quantize_row_q6_K_ref`: Q6_K (210 bytes): ql[128] @0, qh[64] @128,
/// scales[16] @192, d @208.
pub(crate) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(210)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..16 {
            let s =
                make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        b.fill(0);
        if max_abs_scale < GROUP_MAX_EPS {
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d16 = f32_to_f16(1.0 / iscale);
        put_u16(b, 208, d16);
        for ib in 0..16 {
            b[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        for j in 0..16 {
            let d = f16_to_f32(d16) * (b[192 + j] as i8) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        for n in 0..2 {
            let (j, lo, hi) = (128 * n, 64 * n, 128 + 32 * n);
            for i in 0..32 {
                let q = |k: usize| l[j + i + 32 * k] as u8;
                b[lo + i] = (q(0) & 0xF) | ((q(2) & 0xF) << 4);
                b[lo + i + 32] = (q(1) & 0xF) | ((q(3) & 0xF) << 4);
                b[hi + i] =
                    (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
    }
}
