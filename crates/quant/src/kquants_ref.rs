//! Reference quantizers for the asymmetric k-quants (Q2_K, Q4_K, Q5_K),
//! bit-exact with ggml's `quantize_row_*_ref` (no importance matrix).

use crate::float::{f16_to_f32, f32_to_f16};
use crate::kquants::{get_scale_min_k4, QK_K};
use crate::util::{nearest_int, put_u16};

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

/// The shared first half of `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`:
/// per-32 scale/min search, 6-bit scale packing into `b[4..16]`, `d`/`dmin`
/// into `b[0..4]`, then the final levels `0..=nmax` into `l`.
fn quantize_k4_scales(
    x: &[f32],
    b: &mut [u8],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l: &mut [u8; QK_K],
) {
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
        let lj = &mut l[32 * j..32 * j + 32];
        let (s, m) = make_qkx2_quants(nmax, xs, &weights, lj, &mut laux, rmin, 0.1, nstep, false);
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
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
}

/// `quantize_row_q4_K_ref`: Q4_K (144 bytes): d @0, dmin @2, scales[12] @4, qs[128] @16.
pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(144)) {
        let mut l = [0u8; QK_K];
        quantize_k4_scales(x, b, 15, -1.0, 20, &mut l);
        for (n, q) in b[16..144].chunks_exact_mut(32).enumerate() {
            for i in 0..32 {
                q[i] = l[64 * n + i] | (l[64 * n + i + 32] << 4);
            }
        }
    }
}

/// `quantize_row_q5_K_ref`: Q5_K (176 bytes): d @0, dmin @2, scales[12] @4,
/// qh[32] @16, qs[128] @48.
pub(crate) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(176)) {
        let mut l = [0u8; QK_K];
        quantize_k4_scales(x, b, 31, -0.5, 15, &mut l);
        let (qh, ql) = b[16..176].split_at_mut(32);
        qh.fill(0);
        for (n, ql) in ql.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * n), 2u8 << (2 * n));
            for j in 0..32 {
                let mut l1 = l[64 * n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[64 * n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = l1 | (l2 << 4);
            }
        }
    }
}

/// `quantize_row_q2_K_ref`: Q2_K (84 bytes): scales[16] @0, qs[64] @16, d @80, dmin @82.
pub(crate) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(84)) {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut weights = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let lj = &mut l[16 * j..16 * j + 16];
            let (s, m) = make_qkx2_quants(3, xs, &weights, lj, &mut laux, -0.5, 0.1, 15, true);
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let sc = &mut b[0..16];
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            put_u16(b, 80, f32_to_f16(max_scale / Q4SCALE));
        } else {
            sc.fill(0);
            put_u16(b, 80, f32_to_f16(0.0));
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                let q = nearest_int(iscale * mins[j]);
                b[j] |= (q << 4) as u8;
            }
            put_u16(b, 82, f32_to_f16(max_min / Q4SCALE));
        } else {
            put_u16(b, 82, f32_to_f16(0.0));
        }
        let d_all = f16_to_f32(crate::util::le_u16(b, 80));
        let dmin_all = f16_to_f32(crate::util::le_u16(b, 82));
        for j in 0..16 {
            let d = d_all * (b[j] & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (b[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / d);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }
        for n in 0..2 {
            for i in 0..32 {
                let q = |k: usize| l[128 * n + i + 32 * k];
                b[16 + 32 * n + i] = q(0) | (q(1) << 2) | (q(2) << 4) | (q(3) << 6);
            }
        }
    }
}
