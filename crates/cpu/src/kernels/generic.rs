//! Scalar twins of every kernel: ports of ggml's `ggml_vec_dot_*_generic`
//! (same integer sums, same float operation order, no fused multiply-add).
//!
//! Each `dot_*` takes one weight row (ggml block bytes) and the matching
//! activation blocks; extra bytes or blocks on either side are ignored.

// Index loops mirror the C source line by line.
#![allow(clippy::needless_range_loop)]

use super::act::{Q8Block, QK8};
use anedvd_quant::{f16_to_f32, BlockQ8K, QK_K};

/// IQ4_NL / IQ4_XS code book (`kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// f16 at byte offset `o` of `b`.
#[inline]
pub(crate) fn f16_at(b: &[u8], o: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[o], b[o + 1]]))
}

/// Unpacks the 12 packed 6-bit scale/min bytes of Q4_K/Q5_K into
/// `[scales[0..8], mins[0..8]]` (ggml's `utmp` shuffle).
#[inline]
pub(crate) fn unpack_k4_scales(s: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let u = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let t3 = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let t2 = u1 & KMASK1;
    let t1 = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let t0 = u0 & KMASK1;
    let mut out = [0u8; 16];
    for (i, t) in [t0, t1, t2, t3].into_iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&t.to_le_bytes());
    }
    out
}

/// Unpacks Q3_K's 12 scale bytes into 16 signed scales (already minus 32).
#[inline]
pub(crate) fn unpack_q3k_scales(s: &[u8]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let u = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, tmp) = (u(0), u(1), u(2));
    let t2 = ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4);
    let t3 = ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4);
    let t0 = (a0 & KMASK2) | ((tmp & KMASK1) << 4);
    let t1 = (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4);
    let mut out = [0i8; 16];
    for (i, t) in [t0, t1, t2, t3].into_iter().enumerate() {
        for (k, b) in t.to_le_bytes().into_iter().enumerate() {
            out[4 * i + k] = (b as i8).wrapping_sub(32);
        }
    }
    out
}

/// `ggml_vec_dot_q8_0_q8_0_generic`.
pub fn dot_q8_0(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(34).zip(a) {
        let mut sumi = 0i32;
        for j in 0..QK8 {
            sumi += i32::from(x[2 + j] as i8) * i32::from(y.qs[j]);
        }
        sumf += sumi as f32 * (f16_at(x, 0) * y.d);
    }
    sumf
}

/// `ggml_vec_dot_q4_0_q8_0_generic`.
pub fn dot_q4_0(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(18).zip(a) {
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let q = x[2 + j];
            s0 += (i32::from(q & 0x0f) - 8) * i32::from(y.qs[j]);
            s1 += (i32::from(q >> 4) - 8) * i32::from(y.qs[j + QK8 / 2]);
        }
        sumf += (s0 + s1) as f32 * f16_at(x, 0) * y.d;
    }
    sumf
}

/// `ggml_vec_dot_q4_1_q8_1_generic`.
pub fn dot_q4_1(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(20).zip(a) {
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let q = x[4 + j];
            s0 += i32::from(q & 0x0f) * i32::from(y.qs[j]);
            s1 += i32::from(q >> 4) * i32::from(y.qs[j + QK8 / 2]);
        }
        sumf += (f16_at(x, 0) * y.d) * (s0 + s1) as f32 + f16_at(x, 2) * y.s;
    }
    sumf
}

/// `ggml_vec_dot_q5_0_q8_0_generic`.
pub fn dot_q5_0(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(22).zip(a) {
        let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let q = x[6 + j];
            let h0 = (((qh >> j) & 1) << 4) as u8;
            let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
            s0 += (i32::from((q & 0x0f) | h0) - 16) * i32::from(y.qs[j]);
            s1 += (i32::from((q >> 4) | h1) - 16) * i32::from(y.qs[j + QK8 / 2]);
        }
        sumf += (f16_at(x, 0) * y.d) * (s0 + s1) as f32;
    }
    sumf
}

/// `ggml_vec_dot_q5_1_q8_1_generic`.
pub fn dot_q5_1(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(24).zip(a) {
        let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let q = x[8 + j];
            let h0 = (((qh >> j) & 1) << 4) as u8;
            let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
            s0 += i32::from((q & 0x0f) | h0) * i32::from(y.qs[j]);
            s1 += i32::from((q >> 4) | h1) * i32::from(y.qs[j + QK8 / 2]);
        }
        sumf += (f16_at(x, 0) * y.d) * (s0 + s1) as f32 + f16_at(x, 2) * y.s;
    }
    sumf
}

/// `ggml_vec_dot_iq4_nl_q8_0_generic`.
pub fn dot_iq4_nl(w: &[u8], a: &[Q8Block]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(18).zip(a) {
        let d = y.d * f16_at(x, 0);
        let (mut s1, mut s2) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let q = x[2 + j];
            s1 += i32::from(y.qs[j]) * i32::from(KVALUES_IQ4NL[usize::from(q & 0xf)]);
            s2 += i32::from(y.qs[j + QK8 / 2]) * i32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
        sumf += d * (s1 + s2) as f32;
    }
    sumf
}

/// The shared tail of the Q3_K..Q6_K generics: `aux8` holds the 256 unpacked
/// weights, `scales` one scale per 16 (or 32, given twice) elements.
#[inline]
fn k_sum16(aux8: &[i8; QK_K], q8: &[i8; QK_K], scale_of_16: impl Fn(usize) -> i32) -> [i32; 8] {
    let mut aux32 = [0i32; 8];
    for j in 0..QK_K / 16 {
        let scale = scale_of_16(j);
        for h in 0..2 {
            let o = 16 * j + 8 * h;
            for l in 0..8 {
                let p = i32::from(i16::from(q8[o + l]) * i16::from(aux8[o + l]));
                aux32[l] += scale * p;
            }
        }
    }
    aux32
}

/// `ggml_vec_dot_q2_K_q8_K_generic`.
pub fn dot_q2_k(w: &[u8], a: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(84).zip(a) {
        let sc = &x[0..16];
        let qs = &x[16..80];
        let mut summs = 0i32;
        for j in 0..16 {
            summs += i32::from(y.bsums[j]) * i32::from(sc[j] >> 4);
        }
        let dall = y.d * f16_at(x, 80);
        let dmin = y.d * f16_at(x, 82);
        let mut isum = 0i32;
        let mut is = 0;
        let mut q8o = 0;
        for k in 0..QK_K / 128 {
            let q2 = &qs[32 * k..32 * k + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let d = i32::from(sc[is] & 0xf);
                    is += 1;
                    let mut isuml = 0i32;
                    for l in 16 * half..16 * half + 16 {
                        isuml += i32::from(y.qs[q8o + l]) * i32::from((q2[l] >> shift) & 3);
                    }
                    isum += d * isuml;
                }
                q8o += 32;
            }
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// `ggml_vec_dot_q3_K_q8_K_generic`.
pub fn dot_q3_k(w: &[u8], a: &[BlockQ8K]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (x, y) in w.chunks_exact(110).zip(a) {
        let hm = &x[0..32];
        let qs = &x[32..96];
        let mut aux8 = [0i8; QK_K];
        let mut m = 1u8;
        for (c, q3) in qs.chunks_exact(32).enumerate() {
            for s in 0..4 {
                let o = 128 * c + 32 * s;
                for l in 0..32 {
                    let v = ((q3[l] >> (2 * s)) & 3) as i8;
                    aux8[o + l] = v - if hm[l] & m != 0 { 0 } else { 4 };
                }
                m = m.wrapping_shl(1);
            }
        }
        let scales = unpack_q3k_scales(&x[96..108]);
        let aux32 = k_sum16(&aux8, &y.qs, |j| i32::from(scales[j]));
        let d = f16_at(x, 108) * y.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    sums.iter().fold(0.0f32, |s, v| s + v)
}

/// Q4_K and Q5_K share everything but the unpacking of `aux8`.
fn dot_k4_like(w: &[u8], a: &[BlockQ8K], bytes: usize, unpack: fn(&[u8], &mut [i8; QK_K])) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(bytes).zip(a) {
        let mut aux8 = [0i8; QK_K];
        unpack(x, &mut aux8);
        let sm = unpack_k4_scales(&x[4..16]);
        let mut sumi = 0i32;
        for j in 0..QK_K / 16 {
            sumi += i32::from(y.bsums[j]) * i32::from(sm[8 + j / 2]);
        }
        let aux32 = k_sum16(&aux8, &y.qs, |j| i32::from(sm[j / 2]));
        let d = f16_at(x, 0) * y.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
        let dmin = f16_at(x, 2) * y.d;
        sumf -= dmin * sumi as f32;
    }
    sums.iter().fold(sumf, |s, v| s + v)
}

/// `ggml_vec_dot_q4_K_q8_K_generic`.
pub fn dot_q4_k(w: &[u8], a: &[BlockQ8K]) -> f32 {
    dot_k4_like(w, a, 144, |x, aux8| {
        for (j, q4) in x[16..144].chunks_exact(32).enumerate() {
            for l in 0..32 {
                aux8[64 * j + l] = (q4[l] & 0xf) as i8;
                aux8[64 * j + 32 + l] = (q4[l] >> 4) as i8;
            }
        }
    })
}

/// `ggml_vec_dot_q5_K_q8_K_generic`.
pub fn dot_q5_k(w: &[u8], a: &[BlockQ8K]) -> f32 {
    dot_k4_like(w, a, 176, |x, aux8| {
        let hm = &x[16..48];
        for (j, q4) in x[48..176].chunks_exact(32).enumerate() {
            let (m0, m1) = (1u8 << (2 * j), 1u8 << (2 * j + 1));
            for l in 0..32 {
                let h0 = if hm[l] & m0 != 0 { 16 } else { 0 };
                let h1 = if hm[l] & m1 != 0 { 16 } else { 0 };
                aux8[64 * j + l] = (q4[l] & 0xf) as i8 + h0;
                aux8[64 * j + 32 + l] = (q4[l] >> 4) as i8 + h1;
            }
        }
    })
}

/// `ggml_vec_dot_q6_K_q8_K_generic`.
pub fn dot_q6_k(w: &[u8], a: &[BlockQ8K]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (x, y) in w.chunks_exact(210).zip(a) {
        let mut aux8 = [0i8; QK_K];
        for c in 0..2 {
            let q4 = &x[64 * c..64 * c + 64];
            let qh = &x[128 + 32 * c..128 + 32 * c + 32];
            let o = 128 * c;
            for l in 0..32 {
                aux8[o + l] = ((q4[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
                aux8[o + l + 32] = ((q4[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                aux8[o + l + 64] = ((q4[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                aux8[o + l + 96] = ((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let sc = &x[192..208];
        let aux32 = k_sum16(&aux8, &y.qs, |j| i32::from(sc[j] as i8));
        let d = f16_at(x, 208) * y.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    sums.iter().fold(0.0f32, |s, v| s + v)
}

/// `ggml_vec_dot_iq4_xs_q8_K_generic`.
pub fn dot_iq4_xs(w: &[u8], a: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in w.chunks_exact(136).zip(a) {
        let d4d8 = f16_at(x, 0) * y.d;
        let mut h = u16::from_le_bytes([x[2], x[3]]);
        let sl = &x[4..8];
        let qs = &x[8..136];
        for ib in (0..QK_K / 32).step_by(2) {
            let ls1 = (sl[ib / 2] & 0xf) | ((h << 4) & 0x30) as u8;
            let ls2 = (sl[ib / 2] >> 4) | ((h << 2) & 0x30) as u8;
            h >>= 4;
            for (k, ls) in [(0, ls1), (1, ls2)] {
                let blk = ib + k;
                let d = d4d8 * (i32::from(ls) - 32) as f32;
                let q = &qs[16 * blk..16 * blk + 16];
                let q8 = &y.qs[32 * blk..32 * blk + 32];
                let (mut s1, mut s2) = (0i32, 0i32);
                for j in 0..16 {
                    s1 += i32::from(q8[j]) * i32::from(KVALUES_IQ4NL[usize::from(q[j] & 0xf)]);
                    s2 += i32::from(q8[j + 16]) * i32::from(KVALUES_IQ4NL[usize::from(q[j] >> 4)]);
                }
                sumf += d * (s1 + s2) as f32;
            }
        }
    }
    sumf
}

/// `ggml_vec_dot_f32` (generic): products summed in f64.
pub fn dot_f32(w: &[u8], a: &[f32]) -> f32 {
    let mut s = 0.0f64;
    for (b, &y) in w.chunks_exact(4).zip(a) {
        s += f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * y);
    }
    s as f32
}

/// F16 weights times f32 activations, products summed in f64 (ggml instead
/// rounds the activations to f16 first).
pub fn dot_f16(w: &[u8], a: &[f32]) -> f32 {
    let mut s = 0.0f64;
    for (b, &y) in w.chunks_exact(2).zip(a) {
        s += f64::from(f16_to_f32(u16::from_le_bytes([b[0], b[1]])) * y);
    }
    s as f32
}

/// `y += a * x` with `x` little-endian f16 bytes.
pub fn axpy_f16(y: &mut [f32], a: f32, x: &[u8]) {
    for (y, b) in y.iter_mut().zip(x.chunks_exact(2)) {
        *y += a * f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// The row blocks of a [`gemm_f32`] of `m` rows as `(first row, rows)`:
/// 8 at a time, then 4, 2 and 1 (the register tiles the AVX-512 and NEON
/// versions instantiate; the AVX2 one takes 6 rows at a time).
pub(crate) fn gemm_row_blocks(m: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut i = 0;
    std::iter::from_fn(move || {
        let mr = match m.checked_sub(i)? {
            0 => return None,
            8.. => 8,
            4..=7 => 4,
            2..=3 => 2,
            _ => 1,
        };
        i += mr;
        Some((i - mr, mr))
    })
}

/// `c[i * ldc + j] = fma(a[i * rs + p * cs], b[p * ldb + j], c[i * ldc + j])`
/// for `p` in `0..k` in order, for every `i < m`, `j < n`: a small f32
/// matrix product accumulated into `c`, with `a` read through arbitrary
/// strides (so either `a` or its transpose). Fused multiply-adds, so the
/// SIMD versions match it bit for bit. The caller guarantees the extents
/// (see `Kernels::gemm_f32`).
pub fn gemm_f32(
    a: &[f32],
    (rs, cs): (usize, usize),
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    (m, k, n): (usize, usize, usize),
) {
    for i in 0..m {
        let ci = &mut c[i * ldc..i * ldc + n];
        for p in 0..k {
            let x = a[i * rs + p * cs];
            for (cv, bv) in ci.iter_mut().zip(&b[p * ldb..p * ldb + n]) {
                *cv = x.mul_add(*bv, *cv);
            }
        }
    }
}

/// `out[i] = sum_j p[j] * v[j * stride + 2i]` (f16 rows), as repeated
/// [`axpy_f16`] from zero. The caller guarantees `v` holds `p.len()` rows.
pub fn wsum_f16(v: &[u8], stride: usize, p: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    let n = 2 * out.len();
    for (j, &pj) in p.iter().enumerate() {
        axpy_f16(out, pj, &v[j * stride..j * stride + n]);
    }
}

/// `out[g * n + j] = dot_f16(w[j * stride..], q_g)` for the `n_q` queries
/// `q_g` of `q` (row-major, `q.len() / n_q` wide), `n = out.len() / n_q`.
pub fn dot_f16_multi(w: &[u8], stride: usize, q: &[f32], n_q: usize, out: &mut [f32]) {
    if n_q == 0 || stride == 0 {
        return;
    }
    let (hd, n) = (q.len() / n_q, out.len() / n_q);
    if n == 0 {
        return;
    }
    for (qg, o) in q.chunks_exact(hd.max(1)).zip(out.chunks_exact_mut(n)) {
        for (j, o) in o.iter_mut().enumerate() {
            let row = &w[j * stride..(j * stride + 2 * hd).min(w.len())];
            *o = dot_f16(row, qg);
        }
    }
}

/// [`wsum_f16`] for each of the `n_q` weight vectors of `p` (row-major,
/// `p.len() / n_q` long) into `out` (`out.len() / n_q` per vector).
pub fn wsum_f16_multi(v: &[u8], stride: usize, p: &[f32], n_q: usize, out: &mut [f32]) {
    if n_q == 0 {
        return;
    }
    let (len, hd) = (p.len() / n_q, out.len() / n_q);
    for (pg, o) in p
        .chunks_exact(len.max(1))
        .zip(out.chunks_exact_mut(hd.max(1)))
    {
        wsum_f16(v, stride, &pg[..len], o);
    }
}

/// BF16 weights times f32 activations, products summed in f64.
pub fn dot_bf16(w: &[u8], a: &[f32]) -> f32 {
    let mut s = 0.0f64;
    for (b, &y) in w.chunks_exact(2).zip(a) {
        let v = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
        s += f64::from(v * y);
    }
    s as f32
}

/// Applies `dot` to each of the `out.len()` consecutive `row_bytes`-long rows
/// of `w` (rows past the end of `w` are left untouched).
#[inline]
pub(crate) fn rows<A>(dot: fn(&[u8], &[A]) -> f32, w: &[u8], rb: usize, a: &[A], out: &mut [f32]) {
    if rb == 0 {
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
        *o = dot(row, a);
    }
}

macro_rules! rows_fns {
    ($($name:ident => $dot:ident : $a:ty),* $(,)?) => {$(
        #[doc = concat!("Row loop over [`", stringify!($dot), "`].")]
        pub fn $name(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            rows($dot, w, rb, a, out)
        }
    )*};
}

rows_fns! {
    rows_q8_0 => dot_q8_0: Q8Block,
    rows_q4_0 => dot_q4_0: Q8Block,
    rows_q4_1 => dot_q4_1: Q8Block,
    rows_q5_0 => dot_q5_0: Q8Block,
    rows_q5_1 => dot_q5_1: Q8Block,
    rows_iq4_nl => dot_iq4_nl: Q8Block,
    rows_q2_k => dot_q2_k: BlockQ8K,
    rows_q3_k => dot_q3_k: BlockQ8K,
    rows_q4_k => dot_q4_k: BlockQ8K,
    rows_q5_k => dot_q5_k: BlockQ8K,
    rows_q6_k => dot_q6_k: BlockQ8K,
    rows_iq4_xs => dot_iq4_xs: BlockQ8K,
    rows_f32 => dot_f32: f32,
    rows_f16 => dot_f16: f32,
    rows_bf16 => dot_bf16: f32,
}
