//! MXFP4 (OCP microscaling FP4, 32-element blocks with an e8m0 exponent):
//! dequantizer and reference quantizer bit-exact with ggml.

use crate::float::e8m0_to_f32_half;

/// Elements per MXFP4 block.
pub const QK_MXFP4: usize = 32;

/// e2m1 values, doubled (ggml's `kvalues_mxfp4`).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4 (17 bytes): e (e8m0) @0, qs[16] @1; `y = kvalues[q] * 2^(e-128)`.
pub(crate) fn dequantize_mxfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(17).zip(dst.chunks_exact_mut(QK_MXFP4)) {
        let d = e8m0_to_f32_half(b[0]);
        for j in 0..QK_MXFP4 / 2 {
            let q = b[1 + j];
            y[j] = KVALUES_MXFP4[(q & 0x0F) as usize] as f32 * d;
            y[j + QK_MXFP4 / 2] = KVALUES_MXFP4[(q >> 4) as usize] as f32 * d;
        }
    }
}

/// ggml's `best_index_mxfp4`: nearest table entry, first one on ties.
fn best_index(x: f32, e: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * e - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * e - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// `quantize_row_mxfp4_ref`. The exponent uses the platform `log2f`, as ggml does.
pub(crate) fn quantize_mxfp4(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_MXFP4).zip(dst.chunks_exact_mut(17)) {
        let mut amax = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            crate::util::c_f32_to_u8(amax.log2().floor() - 2.0 + 127.0)
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        b[0] = e;
        for j in 0..QK_MXFP4 / 2 {
            b[1 + j] = best_index(x[j], d) | (best_index(x[j + QK_MXFP4 / 2], d) << 4);
        }
    }
}
