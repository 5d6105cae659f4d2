//! Kernels over `N` activation rows at once, generated per instruction set
//! by [`token_kernels!`]: each weight block is decoded once (with the block
//! decoders of `neon.rs`) and dotted with every row's activations. `N = 4`
//! gives the four-token prefill kernels, `N = 1` a single-row dot.
//!
//! Per token the arithmetic is that of `neon.rs`'s row dots, with the
//! integer dot `$dot` in place of `dot16`: the legacy types keep four i32
//! lanes per block, convert them to f32 and multiply-add them by the block
//! scale lane by lane (one horizontal sum at the end); the K-quants sum
//! every block in integers (scaled per sub-block with `mla`, mins from
//! `bsums` with `smull`), then apply the f32 scales as `neon.rs` does. So
//! with `dot16` the result equals `neon.rs`'s bit for bit, and any integer
//! dot (`sdot` included) gives the same K-quant sums.

/// Defines, in the calling module, `dotn_q8_0`, `dotn_q4_0`, `dotn_q5_0`,
/// `dotn_iq4_nl` (Q8 activations) and `dotn_q4_k`, `dotn_q6_k` (Q8_K),
/// each `fn<const N: usize>(&[u8], [&[Act]; N]) -> [f32; N]` over one
/// weight row, and for each the row loop `rows_n_*` with the same generic
/// signature writing `out[N * r + t] = W[r] · a[t]`. Everything is
/// compiled with the target features `$feat`; `$dot(acc, w, a)` adds the
/// 16 products of two `int8x16_t`, four to each i32 lane, to `acc` (an
/// `#[inline]` function enabled for `$feat`). The caller's module must
/// import `std::arch::aarch64::*`, `Q8Block`, `BlockQ8K` and, from
/// `neon.rs`, `ld_i8` and the block decoders.
macro_rules! token_kernels {
    ($feat:literal, $dot:ident) => {
        token_kernels!(@legacy $feat, $dot;
            dotn_q8_0, rows_n_q8_0, 34, halves_q8_0;
            dotn_q4_0, rows_n_q4_0, 18, halves_q4_0;
            dotn_q5_0, rows_n_q5_0, 22, halves_q5_0;
            dotn_iq4_nl, rows_n_iq4_nl, 18, halves_iq4_nl;
        );

        #[target_feature(enable = $feat)]
        fn dotn_q4_k<const N: usize>(x: &[u8], y: [&[BlockQ8K]; N]) -> [f32; N] {
            use $crate::qkernels::generic::{f16_at, unpack_k4_scales};
            let nb = y.iter().fold(x.len() / 144, |n, r| n.min(r.len()));
            let mut sumf = [0.0f32; N];
            for (b, xb) in x.chunks_exact(144).take(nb).enumerate() {
                let (dx, dminx) = (f16_at(xb, 0), f16_at(xb, 2));
                let sm = unpack_k4_scales(&xb[4..16]);
                let mut sumi = [vdupq_n_s32(0); N];
                for j in 0..4 {
                    let q = q4_k_weights(xb, j);
                    let (s_lo, s_hi) = (i32::from(sm[2 * j]), i32::from(sm[2 * j + 1]));
                    for (acc, yt) in sumi.iter_mut().zip(&y) {
                        let q8 = &yt[b].qs[64 * j..64 * j + 64];
                        let lo = $dot(vdupq_n_s32(0), q[0], ld_i8(&q8[..16]));
                        let lo = $dot(lo, q[1], ld_i8(&q8[16..]));
                        let hi = $dot(vdupq_n_s32(0), q[2], ld_i8(&q8[32..]));
                        let hi = $dot(hi, q[3], ld_i8(&q8[48..]));
                        *acc = vmlaq_n_s32(vmlaq_n_s32(*acc, lo, s_lo), hi, s_hi);
                    }
                }
                // The eight 6-bit mins, one per 32 weights (two `bsums`).
                let mins = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(u64::from_le_bytes([
                    sm[8], sm[9], sm[10], sm[11], sm[12], sm[13], sm[14], sm[15],
                ]))));
                for ((s, acc), yt) in sumf.iter_mut().zip(sumi).zip(&y) {
                    let yb = &yt[b];
                    let bs = vpaddq_s16(ld_i16(&yb.bsums[..8]), ld_i16(&yb.bsums[8..]));
                    let summs = vaddvq_s32(vaddq_s32(
                        vmull_s16(vget_low_s16(bs), vget_low_s16(mins)),
                        vmull_high_s16(bs, mins),
                    ));
                    let (d, dmin) = (yb.d * dx, yb.d * dminx);
                    *s += d * vaddvq_s32(acc) as f32 - dmin * summs as f32;
                }
            }
            sumf
        }

        #[target_feature(enable = $feat)]
        fn dotn_q6_k<const N: usize>(x: &[u8], y: [&[BlockQ8K]; N]) -> [f32; N] {
            use $crate::qkernels::generic::f16_at;
            let nb = y.iter().fold(x.len() / 210, |n, r| n.min(r.len()));
            let mut sumf = [0.0f32; N];
            for (b, xb) in x.chunks_exact(210).take(nb).enumerate() {
                let dx = f16_at(xb, 208);
                let sc = &xb[192..208];
                let mut sumi = [vdupq_n_s32(0); N];
                for c in 0..2 {
                    for h in 0..2 {
                        for (k, w) in q6_k_weights(xb, c, h).into_iter().enumerate() {
                            let o = 128 * c + 32 * k + 16 * h;
                            let scale = i32::from(sc[o / 16] as i8);
                            for (acc, yt) in sumi.iter_mut().zip(&y) {
                                let p = $dot(vdupq_n_s32(0), w, ld_i8(&yt[b].qs[o..]));
                                *acc = vmlaq_n_s32(*acc, p, scale);
                            }
                        }
                    }
                }
                for ((s, acc), yt) in sumf.iter_mut().zip(sumi).zip(&y) {
                    *s += (yt[b].d * dx) * vaddvq_s32(acc) as f32;
                }
            }
            sumf
        }

        token_kernels!(@rows $feat;
            rows_n_q4_k => dotn_q4_k: BlockQ8K;
            rows_n_q6_k => dotn_q6_k: BlockQ8K;
        );
    };

    (@legacy $feat:literal, $dot:ident; $($name:ident, $rows:ident, $bb:expr, $halves:ident;)*) => {$(
        #[target_feature(enable = $feat)]
        fn $name<const N: usize>(x: &[u8], y: [&[Q8Block]; N]) -> [f32; N] {
            let nb = y.iter().fold(x.len() / $bb, |n, r| n.min(r.len()));
            let mut acc = [vdupq_n_f32(0.0); N];
            for (b, xb) in x.chunks_exact($bb).take(nb).enumerate() {
                let (lo, hi) = $halves(xb);
                let dx = $crate::qkernels::generic::f16_at(xb, 0);
                for (a, yt) in acc.iter_mut().zip(&y) {
                    let yb = &yt[b];
                    let s = $dot(vdupq_n_s32(0), lo, ld_i8(&yb.qs[..16]));
                    let s = $dot(s, hi, ld_i8(&yb.qs[16..]));
                    *a = vmlaq_n_f32(*a, vcvtq_f32_s32(s), dx * yb.d);
                }
            }
            let mut sums = [0.0f32; N];
            for (s, a) in sums.iter_mut().zip(acc) {
                *s = vaddvq_f32(a);
            }
            sums
        }

        token_kernels!(@rows $feat; $rows => $name: Q8Block;);
    )*};

    (@rows $feat:literal; $($rows:ident => $dot:ident: $act:ty;)*) => {$(
        #[target_feature(enable = $feat)]
        fn $rows<const N: usize>(w: &[u8], rb: usize, a: [&[$act]; N], out: &mut [f32]) {
            if rb == 0 {
                return;
            }
            for (o, row) in out.chunks_exact_mut(N).zip(w.chunks_exact(rb)) {
                o.copy_from_slice(&$dot(row, a));
            }
        }
    )*};
}

pub(super) use token_kernels;
