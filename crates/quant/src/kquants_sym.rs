//! Reference quantizers for the symmetric k-quants (Q3_K, Q6_K), bit-exact
//! with ggml's `quantize_row_*_ref` (no importance matrix).

use crate::float::{f16_to_f32, f32_to_f16};
use crate::kquants::QK_K;
use crate::util::{nearest_int, put_u16};

/// ggml's `GROUP_MAX_EPS`: below this a group counts as all-zero.
const GROUP_MAX_EPS: f32 = 1e-15;

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

/// ggml's `make_q3_quants` with `do_rmse = true`: symmetric 3-bit level
/// search with coordinate-descent refinement. `l` receives levels offset by `nmax`.
fn make_q3_quants_rmse(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
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
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (o, &v) in l.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let li = l[i] as f32;
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] as i32 {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for o in l.iter_mut().take(x.len()) {
        *o += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `quantize_row_q3_K_ref`: Q3_K (110 bytes): hmask[32] @0, qs[64] @32,
/// scales[12] @96, d @108.
pub(crate) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(110)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..16 {
            let s = make_q3_quants_rmse(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            scales[j] = s;
            if s.abs() > amax {
                amax = s.abs();
                max_scale = s;
            }
        }
        b[96..108].fill(0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let q = nearest_int(iscale * scales[j]) as i8;
                let q = ((q as i32).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    b[96 + j] = q & 0xF;
                } else {
                    b[96 + j - 8] |= (q & 0xF) << 4;
                }
                b[96 + 8 + j % 4] |= (q >> 4) << (2 * (j / 4));
            }
            put_u16(b, 108, f32_to_f16(1.0 / iscale));
        } else {
            put_u16(b, 108, f32_to_f16(0.0));
        }
        let d_all = f16_to_f32(crate::util::le_u16(b, 108));
        for j in 0..16 {
            let low = if j < 8 {
                b[96 + j] & 0xF
            } else {
                b[96 + j - 8] >> 4
            };
            let sc = (low | (((b[96 + 8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }
        let (hmask, rest) = b.split_at_mut(32);
        hmask.fill(0);
        let mut m = 0;
        let mut hm: u8 = 1;
        for v in l.iter_mut() {
            if *v > 3 {
                hmask[m] |= hm;
                *v -= 4;
            }
            m += 1;
            if m == 32 {
                m = 0;
                hm = hm.wrapping_shl(1);
            }
        }
        for n in 0..2 {
            for i in 0..32 {
                let q = |k: usize| l[128 * n + i + 32 * k] as u8;
                rest[32 * n + i] = q(0) | (q(1) << 2) | (q(2) << 4) | (q(3) << 6);
            }
        }
    }
}
