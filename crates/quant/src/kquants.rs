//! The k-quant 256-element super-block formats Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
//! and Q8_K: dequantizers bit-exact with ggml's `dequantize_row_*`.
//! (The quantizers live in `kquants_ref`.)

use crate::util::{le_f16, le_u32};

/// Elements per k-quant super-block.
pub const QK_K: usize = 256;

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` from
/// the 12 packed scale bytes of Q4_K/Q5_K.
#[inline]
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q2_K (84 bytes): scales[16] @0, qs[64] @16, d @80, dmin @82.
pub(crate) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(84).zip(dst.chunks_exact_mut(QK_K)) {
        let scales = &b[0..16];
        let d = le_f16(b, 80);
        let min = le_f16(b, 82);
        let mut out = 0;
        let mut is = 0;
        for n in 0..2 {
            let q = &b[16 + 32 * n..16 + 32 * n + 32];
            for j in 0..4 {
                let shift = 2 * j;
                for half in 0..2 {
                    let sc = scales[is];
                    is += 1;
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for &ql in &q[16 * half..16 * half + 16] {
                        y[out] = dl * ((ql >> shift) & 3) as f32 - ml;
                        out += 1;
                    }
                }
            }
        }
    }
}

/// Unpacks Q3_K's twelve scale bytes into sixteen signed 6-bit scales
/// (still offset by 32), exactly as `dequantize_row_q3_K` does.
pub(crate) fn q3_k_scales(packed: &[u8]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a0 = le_u32(packed, 0);
    let a1 = le_u32(packed, 4);
    let tmp = le_u32(packed, 8);
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (i, a) in aux.iter().enumerate() {
        for (k, byte) in a.to_le_bytes().iter().enumerate() {
            out[4 * i + k] = *byte as i8;
        }
    }
    out
}

/// Q3_K (110 bytes): hmask[32] @0, qs[64] @32, scales[12] @96, d @108.
pub(crate) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(110).zip(dst.chunks_exact_mut(QK_K)) {
        let hm = &b[0..32];
        let scales = q3_k_scales(&b[96..108]);
        let d_all = le_f16(b, 108);
        let mut m: u8 = 1;
        let mut out = 0;
        let mut is = 0;
        for n in 0..2 {
            let q = &b[32 + 32 * n..32 + 32 * n + 32];
            for j in 0..4 {
                let shift = 2 * j;
                for half in 0..2 {
                    let dl = d_all * (scales[is] as i32 - 32) as f32;
                    is += 1;
                    for l in 16 * half..16 * half + 16 {
                        let low = ((q[l] >> shift) & 3) as i32;
                        let high = if hm[l] & m != 0 { 0 } else { 4 };
                        y[out] = dl * (low - high) as f32;
                        out += 1;
                    }
                }
                m = m.wrapping_shl(1);
            }
        }
    }
}

/// Q4_K (144 bytes): d @0, dmin @2, scales[12] @4, qs[128] @16.
pub(crate) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(144).zip(dst.chunks_exact_mut(QK_K)) {
        let d = le_f16(b, 0);
        let min = le_f16(b, 2);
        let scales = &b[4..16];
        for (n, yy) in y.chunks_exact_mut(64).enumerate() {
            let q = &b[16 + 32 * n..16 + 32 * n + 32];
            let (sc, m) = get_scale_min_k4(2 * n, scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * n + 1, scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                yy[l] = d1 * (q[l] & 0xF) as f32 - m1;
                yy[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

/// Q5_K (176 bytes): d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48.
pub(crate) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(176).zip(dst.chunks_exact_mut(QK_K)) {
        let d = le_f16(b, 0);
        let min = le_f16(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        for (n, yy) in y.chunks_exact_mut(64).enumerate() {
            let ql = &b[48 + 32 * n..48 + 32 * n + 32];
            let u1: u8 = 1 << (2 * n);
            let u2: u8 = 2 << (2 * n);
            let (sc, m) = get_scale_min_k4(2 * n, scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * n + 1, scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                yy[l] = d1 * ((ql[l] & 0xF) + h1) as f32 - m1;
                yy[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
            }
        }
    }
}

/// Q6_K (210 bytes): ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208.
pub(crate) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(210).zip(dst.chunks_exact_mut(QK_K)) {
        let d = le_f16(b, 208);
        for (n, yy) in y.chunks_exact_mut(128).enumerate() {
            let ql = &b[64 * n..64 * n + 64];
            let qh = &b[128 + 32 * n..128 + 32 * n + 32];
            let sc = &b[192 + 8 * n..192 + 8 * n + 8];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                yy[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                yy[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                yy[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                yy[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
}

/// Q8_K (292 bytes): d (f32) @0, qs[256] (int8) @4, bsums[16] (i16) @260.
pub(crate) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(292).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f32::from_bits(le_u32(b, 0));
        for (y, &q) in y.iter_mut().zip(&b[4..260]) {
            *y = d * (q as i8) as f32;
        }
    }
}
