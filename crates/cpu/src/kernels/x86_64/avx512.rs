//! AVX-512 F/BW/VL kernels, in two builds: with VNNI (`vpdpbusd`) and
//! without (`vpmaddubsw` + `vpmaddwd`). Legacy blocks are taken two at a
//! time (one 512-bit register), K-quants 64 weights at a time; types not
//! listed in the tables below use the AVX2 kernels.

use super::super::generic::unpack_k4_scales;
use super::super::{Q8Block, Table};
use super::avx2::{
    self, f16v, hsum128, ld128, ld256, ld256i, rd16, rd32, signed_iq4_nl, signed_q8_0,
};
use super::avx512_packed_k::{PREFETCH_AHEAD, PREFETCH_AHEAD_FAR};
use super::avx512_panel::ld512;
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

/// `acc + sum of 4 (u8 × i8)` per i32 lane, with VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn dp_vnni(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(acc, u, s)
}

/// `acc + sum of 4 (u8 × i8)` per i32 lane, without VNNI (no saturation
/// for the operand ranges used here: `u <= 128`, `|s| <= 127` or `u <= 63`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn dp_bw(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    let p = _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
    _mm512_add_epi32(acc, p)
}

/// `acc + sum of 2 (i16 × i16)` per i32 lane, with VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn dpw_vnni(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    _mm512_dpwssd_epi32(acc, a, b)
}

/// `acc + sum of 2 (i16 × i16)` per i32 lane, without VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn dpw_bw(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
}

/// A `vpshufb` index repeating i16 lane `lo` of each 128-bit lane in the
/// low 256 bits and lane `hi` in the high 256 bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn i16_pair_index(lo: i32, hi: i32) -> __m512i {
    let rep = |k: i32| (2 * k) | ((2 * k + 1) << 8) | ((2 * k) << 16) | ((2 * k + 1) << 24);
    _mm512_mask_blend_epi32(
        0xff00,
        _mm512_set1_epi32(rep(lo)),
        _mm512_set1_epi32(rep(hi)),
    )
}

/// The 12 packed scale bytes of a Q4_K/Q5_K block `xb` (at 4..16) as 8
/// scales then 8 mins, one byte each (`unpack_k4_scales` in one register):
/// with `u = xb[4..16]` as three u32, `[u0 & 3f, (u2 & 0f) | (u0 >> 6 & 3)
/// << 4, u1 & 3f, (u2 >> 4 & 0f) | (u1 >> 6 & 3) << 4]` per byte.
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn k4_scales(xb: &[u8]) -> __m128i {
    let v = ld128(&xb[4..20]);
    // [u0, u2, u1, u2] with the last shifted right by 4, and [u0, u0, u1, u1]
    let w1 = _mm_srlv_epi32(
        _mm_shuffle_epi32::<0b10_01_10_00>(v),
        _mm_set_epi32(4, 0, 0, 0),
    );
    let w2 = _mm_shuffle_epi32::<0b01_01_00_00>(v);
    let (m6, m4) = (0x3f3f_3f3f, 0x0f0f_0f0f);
    let lo = _mm_and_si128(w1, _mm_set_epi32(m4, m6, m4, m6));
    let hi = _mm_and_si128(
        _mm_srli_epi32::<2>(w2),
        _mm_set_epi32(0x3030_3030, 0, 0x3030_3030, 0),
    );
    _mm_or_si128(lo, hi)
}

/// Half `c` (weights `128c..128c + 128`) of a Q6_K block `xb` as unsigned
/// 6-bit bytes in order, 64 per register. The low nibbles of the 64 `ql`
/// bytes are weights `0..64` of the half, the high nibbles `64..128`; each
/// `qh` byte holds bits 4..5 of weights `l, l+32, l+64, l+96` at bit pairs
/// 0, 2, 4, 6, moved to bits 4..5 by per-half 16-bit shifts (what crosses
/// into the neighbouring byte is masked away).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn unpack_q6_k_half(xb: &[u8], c: usize) -> [__m512i; 2] {
    let bits = ld512(&xb[64 * c..]);
    let hb = _mm512_broadcast_i64x4(ld256(&xb[128 + 32 * c..]));
    let (m4, m30) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    const S2: i64 = 0x0002_0002_0002_0002;
    const S4: i64 = 0x0004_0004_0004_0004;
    let h_lo = _mm512_sllv_epi16(hb, _mm512_set_epi64(S2, S2, S2, S2, S4, S4, S4, S4));
    let h_hi = _mm512_srlv_epi16(hb, _mm512_set_epi64(S2, S2, S2, S2, 0, 0, 0, 0));
    // `a | (b & c)`
    const OR_AND: i32 = 0xf8;
    let lo = _mm512_ternarylogic_epi32::<OR_AND>(_mm512_and_si512(bits, m4), h_lo, m30);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(bits), m4);
    [lo, _mm512_ternarylogic_epi32::<OR_AND>(hi, h_hi, m30)]
}

/// The `vpermw` index that spreads a Q6_K block's 16 group scales (i16
/// lanes 0..16) over the 64-weight register `r` (weights `64r..64r + 64`
/// of the block): its 128-bit lane `l` repeats group `4r + l`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn q6_k_scale_index(r: i64) -> __m512i {
    let rep = |g: i64| g * 0x0001_0001_0001_0001;
    let g = 4 * r;
    _mm512_set_epi64(
        rep(g + 3),
        rep(g + 3),
        rep(g + 2),
        rep(g + 2),
        rep(g + 1),
        rep(g + 1),
        rep(g),
        rep(g),
    )
}

/// `[lo | hi]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Loads 64 signed bytes from the start of `s`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
fn ld512i(s: &[i8]) -> __m512i {
    let s = &s[..64];
    // SAFETY: `s` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// One pair of Q4_0 / Q5_0 blocks as unsigned bytes `w + OFF`, the
/// weights in block order `[lo0 hi0 lo1 hi1]` (each block's 16 bytes
/// broadcast to both 128-bit lanes of its half, shifted by 0 and 4; the
/// Q5_0 fifth bit added through a byte mask).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
#[inline]
fn unpack_q45_0<const FIVE: bool>(x0: &[u8], x1: &[u8]) -> __m512i {
    let qs = if FIVE { 6 } else { 2 };
    let m4 = _mm512_set1_epi8(0x0f);
    const S4: i64 = 0x0004_0004_0004_0004;
    let shifts = _mm512_set_epi64(S4, S4, 0, 0, S4, S4, 0, 0);
    let b0 = _mm256_broadcastsi128_si256(ld128(&x0[qs..]));
    let b1 = _mm256_broadcastsi128_si256(ld128(&x1[qs..]));
    let t = _mm512_srlv_epi16(join(b0, b1), shifts);
    let mut u = _mm512_and_si512(t, m4);
    if FIVE {
        let k = _mm512_kunpackd(u64::from(rd32(x1, 2)), u64::from(rd32(x0, 2)));
        u = _mm512_mask_add_epi8(u, k, u, _mm512_set1_epi8(0x10));
    }
    u
}

/// Bytes of a row stream prefetched ahead of the row being multiplied:
/// without it one decode token's Q4_K/Q6_K rows stream slower than the
/// hardware prefetcher fetches them (a 2.7B-parameter Q4_K_M model decoded
/// at 6.2 tok/s on 2 threads, 9.3 with 1-2 KB ahead, 8.5 with 4-8 KB).
/// Rows longer than this are not prefetched at all: Llama-3.1-8B's 11.8 KB
/// Q6_K `ffn_down` rows streamed at 17 GB/s prefetched whole, 28 with 2 KB
/// of each prefetched, 36 with none (Zen 5 host, one thread, 48 MB): a long
/// row is a stream the hardware prefetcher follows by itself.
///
/// Q6_K rows (the file's layout, used where the model does not fit the
/// last-level cache) are not prefetched: on a Zen 4 host the 255 MB Q6_K
/// 151936x2048 product (1680-byte rows) went 14.3-16.8 -> 18.8-20.7 GB/s on
/// one thread and 25.8-26.9 -> 27.5-31.6 on two without it (three
/// alternating runs), and Llama-3.2-1B-shaped decode, whose tied output
/// matrix is such rows, was faster in 5 of 6 alternating pairs (medians
/// 28.8 -> 30.3 tok/s). The AVX2 row kernels prefetch nothing either.
const ROWS_PREFETCH_AHEAD: usize = 2048;

/// A safe row loop around a `#[target_feature]` dot.
macro_rules! rows512 {
    ($feat:literal; $($rows:ident, $inner:ident => $dot:ident : $a:ty, ahead $ahead:expr;)*) => {$(
        #[target_feature(enable = $feat)]
        fn $inner(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            if rb == 0 {
                return;
            }
            for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
                // The rows are one contiguous stream: its bytes
                // `$ahead` further on are fetched while this
                // short row is multiplied
                // (prefetching never faults, so past the end is harmless).
                let ahead = row.as_ptr().wrapping_add($ahead);
                let len = if rb <= $ahead { rb } else { 0 };
                for l in (0..len).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
                }
                *o = $dot(row, a);
            }
        }

        fn $rows(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            // SAFETY: only reachable through the enclosing module's `TABLE`,
            // which `avx512_table` returns after detecting every feature in
            // `$feat`.
            unsafe { $inner(w, rb, a, out) }
        }
    )*};
}

macro_rules! kernels {
    ($m:ident, $feat:literal, $dp:ident, $dpw:ident, $base:expr, $doc:literal) => {
        #[doc = $doc]
        pub(super) mod $m {
            use super::*;

            /// Two signed legacy blocks per 512-bit step.
            macro_rules! signed_dot {
                ($dot:ident, $bb:expr, $signed:ident) => {
                    #[target_feature(enable = $feat)]
                    fn $dot(x: &[u8], y: &[Q8Block]) -> f32 {
                        let nb = (x.len() / $bb).min(y.len());
                        let (x, y) = (&x[..nb * $bb], &y[..nb]);
                        let mut acc = _mm512_setzero_ps();
                        let step = |acc: __m512, wx: __m512i, wy: __m512i, d: __m512| {
                            let ax = _mm512_abs_epi8(wx);
                            let neg = _mm512_movepi8_mask(wx);
                            let sy = _mm512_mask_sub_epi8(wy, neg, _mm512_setzero_si512(), wy);
                            let s = $dp(_mm512_setzero_si512(), ax, sy);
                            _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc)
                        };
                        let mut xs = x.chunks_exact(2 * $bb);
                        let mut ys = y.chunks_exact(2);
                        for (xp, yp) in (&mut xs).zip(&mut ys) {
                            let (x0, x1) = xp.split_at($bb);
                            let wx = join($signed(x0), $signed(x1));
                            let wy = join(ld256i(&yp[0].qs), ld256i(&yp[1].qs));
                            let d = _mm512_mask_blend_ps(
                                0xff00,
                                _mm512_set1_ps(f16v(rd16(x0, 0)) * yp[0].d),
                                _mm512_set1_ps(f16v(rd16(x1, 0)) * yp[1].d),
                            );
                            acc = step(acc, wx, wy, d);
                        }
                        if let (Some(yb), x0) = (ys.remainder().first(), xs.remainder()) {
                            let z = _mm256_setzero_si256();
                            let wx = join($signed(x0), z);
                            let wy = join(ld256i(&yb.qs), z);
                            let d = _mm512_maskz_mov_ps(
                                0x00ff,
                                _mm512_set1_ps(f16v(rd16(x0, 0)) * yb.d),
                            );
                            acc = step(acc, wx, wy, d);
                        }
                        _mm512_reduce_add_ps(acc)
                    }
                };
            }

            signed_dot!(dot_q8_0, 34, signed_q8_0);
            signed_dot!(dot_iq4_nl, 18, signed_iq4_nl);

            /// Q4_0 (`FIVE = false`) and Q5_0, two blocks per step, weights
            /// offset to unsigned bytes (`u = w + OFF <= 31`, the 5th bit set
            /// through a byte mask) and `dot(OFF, y)` subtracted. Exact.
            #[target_feature(enable = $feat)]
            #[inline]
            fn dot_q45_0<const BB: usize, const FIVE: bool>(x: &[u8], y: &[Q8Block]) -> f32 {
                let nb = (x.len() / BB).min(y.len());
                let (x, y) = (&x[..nb * BB], &y[..nb]);
                let offv = _mm512_set1_epi8(if FIVE { 16 } else { 8 });
                let step = |acc: __m512, x0: &[u8], x1: &[u8], y0: &Q8Block, y1: &Q8Block| {
                    let u = unpack_q45_0::<FIVE>(x0, x1);
                    let yv = join(ld256i(&y0.qs), ld256i(&y1.qs));
                    let p = _mm512_sub_epi32(
                        $dp(_mm512_setzero_si512(), u, yv),
                        $dp(_mm512_setzero_si512(), offv, yv),
                    );
                    let d = _mm512_mask_blend_ps(
                        0xff00,
                        _mm512_set1_ps(f16v(rd16(x0, 0)) * y0.d),
                        _mm512_set1_ps(f16v(rd16(x1, 0)) * y1.d),
                    );
                    _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc)
                };
                let mut acc = _mm512_setzero_ps();
                let mut xs = x.chunks_exact(2 * BB);
                let mut ys = y.chunks_exact(2);
                for (xp, yp) in (&mut xs).zip(&mut ys) {
                    let (x0, x1) = xp.split_at(BB);
                    acc = step(acc, x0, x1, &yp[0], &yp[1]);
                }
                if let Some(yb) = ys.remainder().first() {
                    // The odd last block, paired with a zero activation block.
                    let x0 = xs.remainder();
                    acc = step(acc, x0, x0, yb, &Q8Block::ZERO);
                }
                _mm512_reduce_add_ps(acc)
            }

            #[target_feature(enable = $feat)]
            fn dot_q4_0(x: &[u8], y: &[Q8Block]) -> f32 {
                dot_q45_0::<18, false>(x, y)
            }

            #[target_feature(enable = $feat)]
            fn dot_q5_0(x: &[u8], y: &[Q8Block]) -> f32 {
                dot_q45_0::<22, true>(x, y)
            }

            /// Q4_K (`FIVE = false`) and Q5_K: 64 weights (two sub-blocks) per step.
            #[target_feature(enable = $feat)]
            #[inline]
            fn dot_k4_like<const BB: usize, const QS: usize, const FIVE: bool>(
                x: &[u8],
                y: &[BlockQ8K],
            ) -> f32 {
                let m4 = _mm256_set1_epi8(0x0f);
                let one = _mm256_set1_epi8(1);
                let mut acc = _mm512_setzero_ps();
                let mut acc_m = _mm_setzero_ps();
                for (xb, yb) in x.chunks_exact(BB).zip(y) {
                    let d = yb.d * f16v(rd16(xb, 0));
                    let dmin = -yb.d * f16v(rd16(xb, 2));
                    let sm = unpack_k4_scales(&xb[4..16]);
                    let prod = avx2::k4_mins(&sm, yb);
                    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
                    let mut hb = if FIVE {
                        ld256(&xb[16..48])
                    } else {
                        _mm256_setzero_si256()
                    };
                    let mut sumi = _mm512_setzero_si512();
                    for j in 0..4 {
                        let bits = ld256(&xb[QS + 32 * j..]);
                        let mut lo = _mm256_and_si256(bits, m4);
                        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                        if FIVE {
                            let hl = _mm256_slli_epi16::<4>(_mm256_and_si256(hb, one));
                            let hh =
                                _mm256_slli_epi16::<3>(_mm256_and_si256(hb, _mm256_set1_epi8(2)));
                            hb = _mm256_srli_epi16::<2>(hb);
                            lo = _mm256_or_si256(lo, hl);
                            hi = _mm256_or_si256(hi, hh);
                        }
                        let p = $dp(
                            _mm512_setzero_si512(),
                            join(lo, hi),
                            ld512i(&yb.qs[64 * j..]),
                        );
                        let sc = _mm512_mask_blend_epi32(
                            0xff00,
                            _mm512_set1_epi32(i32::from(sm[2 * j])),
                            _mm512_set1_epi32(i32::from(sm[2 * j + 1])),
                        );
                        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, sc));
                    }
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
                }
                _mm512_reduce_add_ps(acc) + hsum128(acc_m)
            }

            /// Q4_K, 128 weights (four sub-blocks) per step: one 64-byte
            /// load of nibbles, `vpmaddubsw` into i16 pairs (at most
            /// 2·15·128, exact), then the sub-block scales as i16 lanes
            /// (`vpmaddwd`/`vpdpwssd`; at most 2·3840·63 per i32, exact),
            /// shuffled out of one register per block instead of broadcast
            /// from scalars. The same integer sums as `dot_k4_like`.
            /// (Two or four rows per call, sharing the activation's work,
            /// ran ~15% faster from the caches but at less than half the
            /// speed from DRAM on a Zen 4 host, whatever the prefetching:
            /// likely the interleaved streams defeat the hardware stream
            /// prefetcher; see docs/BENCHMARKS.md.)
            #[target_feature(enable = $feat)]
            fn dot_q4_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
                let m4 = _mm512_set1_epi8(0x0f);
                // per 128-weight step jj: the i16 scale lanes of its four
                // sub-blocks, low nibbles [4jj | 4jj+2], high [4jj+1 | 4jj+3]
                let idx_lo = [i16_pair_index(0, 2), i16_pair_index(4, 6)];
                let idx_hi = [i16_pair_index(1, 3), i16_pair_index(5, 7)];
                let mut acc = _mm512_setzero_ps();
                let mut acc_m = _mm_setzero_ps();
                for (xb, yb) in x.chunks_exact(144).zip(y) {
                    let d = yb.d * f16v(rd16(xb, 0));
                    let dmin = -yb.d * f16v(rd16(xb, 2));
                    let sm = k4_scales(xb);
                    let mins = _mm_cvtepu8_epi16(_mm_srli_si128::<8>(sm));
                    let prod = _mm_madd_epi16(mins, avx2::q8k_sub_sums(yb));
                    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
                    let sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
                    let mut sumi = _mm512_setzero_si512();
                    for jj in 0..2 {
                        let bits = ld512(&xb[16 + 64 * jj..]);
                        let lo = _mm512_and_si512(bits, m4);
                        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(bits), m4);
                        let q = &yb.qs[128 * jj..];
                        let ylo = join(ld256i(q), ld256i(&q[64..]));
                        let yhi = join(ld256i(&q[32..]), ld256i(&q[96..]));
                        let plo = _mm512_maddubs_epi16(lo, ylo);
                        let phi = _mm512_maddubs_epi16(hi, yhi);
                        sumi = $dpw(sumi, plo, _mm512_shuffle_epi8(sc, idx_lo[jj]));
                        sumi = $dpw(sumi, phi, _mm512_shuffle_epi8(sc, idx_hi[jj]));
                    }
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
                }
                _mm512_reduce_add_ps(acc) + hsum128(acc_m)
            }

            #[target_feature(enable = $feat)]
            fn dot_q5_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
                dot_k4_like::<176, 48, true>(x, y)
            }

            /// Q6_K: unsigned 6-bit weights (`unpack_q6_k_half`), the `-32`
            /// folded in through `bsums`; 64 weights per register,
            /// `vpmaddubsw` into i16 pairs (at most 2·63·128, exact), then
            /// the group scales as i16 lanes (`vpdpwssd`/`vpmaddwd`, one
            /// `vpermw` each). Against the 256-bit unpacking, `vpdpbusd`
            /// and `vpmulld` per register before, the 0.2 MB L2-resident
            /// Q6_K 128x2048 product went 28.4-28.6 -> 33.2-33.5 GB/s on a
            /// Zen 4 host (one thread, alternating runs); from DRAM, and in
            /// Qwen2.5-3B-shaped decode, no change beyond the noise.
            #[target_feature(enable = $feat)]
            fn dot_q6_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
                let idx = [0, 1, 2, 3].map(|r| q6_k_scale_index(r));
                let mut acc = _mm512_setzero_ps();
                for (xb, yb) in x.chunks_exact(210).zip(y) {
                    let d = yb.d * f16v(rd16(xb, 208));
                    let sc = _mm256_cvtepi8_epi16(ld128(&xb[192..208]));
                    // SAFETY: `bsums` is 16 i16 = 32 readable bytes; unaligned load.
                    let bs = unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) };
                    let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc, bs));
                    let mut sumi =
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));
                    let sc = _mm512_zextsi256_si512(sc);
                    for c in 0..2 {
                        for (m, q) in unpack_q6_k_half(xb, c).into_iter().enumerate() {
                            let r = 2 * c + m;
                            let p = _mm512_maddubs_epi16(q, ld512i(&yb.qs[64 * r..]));
                            sumi = $dpw(sumi, p, _mm512_permutexvar_epi16(idx[r], sc));
                        }
                    }
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
                }
                _mm512_reduce_add_ps(acc)
            }

            rows512! {
                $feat;
                rows_q8_0, inner_q8_0 => dot_q8_0: Q8Block, ahead ROWS_PREFETCH_AHEAD;
                rows_q4_0, inner_q4_0 => dot_q4_0: Q8Block, ahead ROWS_PREFETCH_AHEAD;
                rows_q5_0, inner_q5_0 => dot_q5_0: Q8Block, ahead ROWS_PREFETCH_AHEAD;
                rows_iq4_nl, inner_iq4_nl => dot_iq4_nl: Q8Block, ahead ROWS_PREFETCH_AHEAD;
                rows_q4_k, inner_q4_k => dot_q4_k: BlockQ8K, ahead ROWS_PREFETCH_AHEAD;
                rows_q5_k, inner_q5_k => dot_q5_k: BlockQ8K, ahead ROWS_PREFETCH_AHEAD;
                // `ahead 0`: no row is that short, so none is prefetched.
                rows_q6_k, inner_q6_k => dot_q6_k: BlockQ8K, ahead 0;
            }

            /// This build's table (AVX2 kernels for the other types, `$base` for
            /// the panel kernels not listed).
            pub(in super::super) const TABLE: Table = Table {
                q4_0: rows_q4_0,
                q5_0: rows_q5_0,
                q8_0: rows_q8_0,
                iq4_nl: rows_iq4_nl,
                q4_k: rows_q4_k,
                q5_k: rows_q5_k,
                q6_k: rows_q6_k,
                panel_q4_k: Some(super::super::avx512_panel_k::$m::panel_q4_k),
                dot_f16_multi: super::super::avx512_attn::dot_f16_multi,
                wsum_f16_multi: super::super::avx512_attn::wsum_f16_multi,
                gemm_f32: Some(super::super::avx512_attn::gemm_f32),
                panel_q6_k: Some(super::super::avx512_panel_k::$m::panel_q6_k),
                ..$base
            };
        }
    };
}

/// The VNNI build's packed kernels: the legacy types, Q4_K and Q6_K
/// packed at load (`avx512_packed`, `avx512_packed_k`; Q6_K only where the
/// model fits the last-level cache), and the legacy types per call in the
/// same layout where they were not.
const PANELS_VNNI: Table = Table {
    panel_q4_0: Some(super::avx512_packed::panel_q4_0),
    panel_q5_0: Some(super::avx512_packed::panel_q5_0),
    panel_q8_0: Some(super::avx512_packed::panel_q8_0),
    panel_iq4_nl: Some(super::avx512_packed::panel_iq4_nl),
    pack: super::avx512_packed::pack,
    packed: Some(super::avx512_packed::packed_products::<false>),
    packed_k: Some(super::avx512_packed_k::packed_products_k::<PREFETCH_AHEAD>),
    packed_q6_k_streams: false,
    // Every batch the four-token kernels would take goes to the panels above.
    x4_q8_0: None,
    x4_iq4_nl: None,
    ..avx2::TABLE
};

/// The BW build's legacy-type panel kernels (repacked per call; Q4_0 and
/// Q5_0 only, see `avx512_panel`). Nothing is packed at load: the AVX2
/// table's packed kernels were measured on Zen 2 only, never against the
/// BW row and panel kernels on a CPU without VNNI.
const PANELS_BW: Table = Table {
    panel_q4_0: Some(super::avx512_panel::bw::panel_q4_0),
    panel_q5_0: Some(super::avx512_panel::bw::panel_q5_0),
    packed: None,
    packed_k: None,
    ..avx2::TABLE
};

kernels!(
    vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dp_vnni,
    dpw_vnni,
    PANELS_VNNI,
    "Kernels using `vpdpbusd` (AVX512-VNNI)."
);
kernels!(
    bw,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    dp_bw,
    dpw_bw,
    PANELS_BW,
    "Kernels using `vpmaddubsw` + `vpmaddwd` (AVX512-BW)."
);

/// The VNNI table on Zen 4 (`x86_64::is_zen4`), whose cores streamed DRAM
/// faster with three choices measured there (docs/BENCHMARKS.md): packed
/// K-quants prefetched further ahead ([`PREFETCH_AHEAD_FAR`]), the legacy
/// types' products of few tokens in AVX2 (`avx512_packed::FEW_TOKENS`),
/// and the AVX2 attention dots over f16 keys. Those dots, over three
/// 32000-position caches (`attention_decode` bench, 2 threads), read
/// 21.3-22.0 GB/s in three of four alternating runs against 12.8-20.2 for
/// the AVX-512 ones (one thread: 1.3 against 1.8 ms per layer; the AVX2
/// weighted sums were slower, 16.1-19.1 GB/s), and Gemma 3 270M decode at
/// depth 8192 was faster in 4 of 4 alternating pairs (medians 94.2 -> 97.9
/// tok/s).
pub(super) const ZEN4_VNNI: Table = Table {
    packed: Some(super::avx512_packed::packed_products::<true>),
    packed_k: Some(super::avx512_packed_k::packed_products_k::<PREFETCH_AHEAD_FAR>),
    dot_f16_multi: super::avx2_attn::dot_f16_multi,
    ..vnni::TABLE
};
