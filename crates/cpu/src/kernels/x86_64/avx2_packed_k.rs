//! AVX2 products of Q4_K and Q6_K weights packed once at load (layouts in
//! `kernels/packed_k.rs`, the same bytes the AVX-512 VNNI kernels read):
//! each 64-byte register of a panel is two ymm halves, rows 0-7 and rows
//! 8-15, each lane four quant bytes of one row. Without `vpdpbusd` a
//! product is `vpmaddubsw` (unsigned quants × four broadcast signed
//! activation bytes, pair sums in i16 lanes `2 r`, `2 r + 1`); those are
//! summed in i16 over a sub-block (Q4_K: eight registers, at most
//! `16 · 15 · 128 = 30720`; Q6_K: two, at most `4 · 63 · 128 = 32256`)
//! and a single `vpmaddwd` against the sub-block's scale duplicated in
//! both halves of lane `r` both applies the scale and widens to i32.
//! Per 32 weights of a row that is one `vpmaddubsw` and an eighth (Q4_K)
//! or a half (Q6_K) of a `vpmaddwd`, where the file-layout row kernels
//! (`avx2::dot_q4_k`) take two of each; on Zen 2, whose one integer
//! multiply pipe bounds them, the row kernels stream Q4_K at ~15 GB/s
//! per core in cache, below what two cores read from DRAM.
//!
//! For a prefill chunk of [`UNPACK_MIN_TOKENS`] or more, a Q6_K panel is
//! first unpacked for the whole chunk ([`unpack_q6k_panel`]) and read four
//! tokens at a time: rebuilding each register's 6-bit quants from `ql` and
//! `qh` (about four shifts and masks) once per four tokens took a third of
//! the kernel's time, because those instructions share the pipes of the
//! products. Q6_K at 64 tokens went from 29 to 41 GB/s per token
//! (`kernels_matvec`), Llama-3.2-1B-shaped pp512 from 115 to 125 tok/s.
//!
//! The integer sums are exactly the scalar twin's (`packed_k::products`)
//! and combine with the same fused multiply-adds, so the results are
//! equal bit for bit.

use super::super::packed_k::{
    panel_bytes, Q4K_BLOCK, Q4K_QS, Q4K_SCALES, Q6K_HEADER, Q6K_QH, Q6K_QUANTS,
};
use super::super::PanelOut;
use super::avx2::{ld128, ld256};
use super::avx2_panel_k::{bsum_pairs, quad};
use anedvd_base::GgmlType;
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

/// Rows per panel (two ymm halves of eight).
const PANEL: usize = 16;
/// Tokens per chunk (activations of one chunk stay in L2).
const TOKEN_CHUNK: usize = 64;
/// Tokens of a chunk from which a Q6_K panel is unpacked for the chunk
/// ([`unpack_q6k_panel`]) and read four tokens at a time; smaller chunks
/// take two at a time from the packed bytes. At 640x2048 (`kernels_matvec`,
/// GB/s per token, two at a time / unpacked): 4 tokens 28.3 / 17.0, 8
/// tokens 28.7 / 25.0, 16 tokens 28.9 / 32.5.
const UNPACK_MIN_TOKENS: usize = 16;
/// Bytes prefetched ahead of the block being read, a quarter of a block's
/// share between its steps (see `avx512_packed_k::PREFETCH_AHEAD`). Shorter
/// than the AVX-512 kernels' 2048: a Zen 2 core streams about half a Zen 5
/// core's bytes per second, so the misses it keeps in flight cover fewer
/// bytes ahead, and prefetching further only queues requests behind them.
/// Two threads from DRAM (`kernels_matvec` "threads" rows): Q4_K 81920x2048
/// ~22 GB/s at 2048, ~27 at 1280, Q6_K ~26 at either; the
/// Llama-3.2-1B-shaped file's decode 29.1-29.6 -> 31.0-31.8 tok/s (the
/// sweep of distances: docs/BENCHMARKS.md, the seventh issue-18 session).
const PREFETCH_AHEAD: usize = 1280;

/// Eight bytes (the low half of `v` or, with `HI`, its high half) as
/// sixteen i16 lanes, each byte in both lanes `2 r` and `2 r + 1`:
/// `vpmaddwd` against it multiplies both pair sums of row `r` by it.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dup<const HI: bool, const SIGNED: bool>(v: __m128i) -> __m256i {
    pairs::<HI, SIGNED>(v, v)
}

/// Rows 0-7 (`HI` false) or 8-15 of two byte groups as i16 pairs: lane
/// `r` holds row `r`'s byte of `a` in its low half and of `b` in its high
/// half (`vpmaddwd` against a broadcast pair sums both products).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pairs<const HI: bool, const SIGNED: bool>(a: __m128i, b: __m128i) -> __m256i {
    let d = if HI {
        _mm_unpackhi_epi8(a, b)
    } else {
        _mm_unpacklo_epi8(a, b)
    };
    if SIGNED {
        _mm256_cvtepi8_epi16(d)
    } else {
        _mm256_cvtepu8_epi16(d)
    }
}

/// The 16 rows' eight sub-block scales and eight mins of a Q4_K panel
/// block, one byte per row (lane), unpacked with 128-bit byte operations
/// (the AVX-512 kernels widen them to i32 lanes).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q4k_scales(blk: &[u8]) -> ([__m128i; 8], [__m128i; 8]) {
    let g: [__m128i; 12] = std::array::from_fn(|i| ld128(&blk[Q4K_SCALES + 16 * i..]));
    let (m63, m15, m3) = (_mm_set1_epi8(63), _mm_set1_epi8(15), _mm_set1_epi8(3));
    // (v >> 6) << 4 per byte: the shifts are 16-bit, the masks keep each
    // byte's own bits.
    let top = |v: __m128i| _mm_slli_epi16::<4>(_mm_and_si128(_mm_srli_epi16::<6>(v), m3));
    let mut sc = [_mm_setzero_si128(); 8];
    let mut mn = [_mm_setzero_si128(); 8];
    for j in 0..4 {
        sc[j] = _mm_and_si128(g[j], m63);
        mn[j] = _mm_and_si128(g[j + 4], m63);
        sc[j + 4] = _mm_or_si128(_mm_and_si128(g[j + 8], m15), top(g[j]));
        mn[j + 4] = _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16::<4>(g[j + 8]), m15),
            top(g[j + 4]),
        );
    }
    (sc, mn)
}

/// Eight f16 at `s` (rows 0-7 or 8-15 of a block's `d` or `dmin`) as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn f16x8(s: &[u8]) -> __m256 {
    _mm256_cvtph_ps(ld128(s))
}

/// Adds `q · y` (unsigned bytes × signed bytes, pair sums) to `acc`'s i16
/// lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn add_dot16(acc: __m256i, q: __m256i, y: __m256i) -> __m256i {
    _mm256_add_epi16(acc, _mm256_maddubs_epi16(q, y))
}

/// One Q4_K panel block against `T` tokens: adds row `8 h + r` · token
/// `t`'s share of this super-block to lane `r` of `acc[t][h]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block_q4_k<const T: usize>(
    blk: &[u8; Q4K_BLOCK],
    y: [&BlockQ8K; T],
    acc: &mut [[__m256; 2]; T],
) {
    let (sc, mn) = q4k_scales(blk);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut isum = [[_mm256_setzero_si256(); 2]; T];
    let ahead = blk.as_ptr().wrapping_add(PREFETCH_AHEAD);
    for k in 0..4 {
        prefetch(ahead.wrapping_add(k * Q4K_BLOCK / 4), Q4K_BLOCK / 4);
        // Sub-blocks 2k (low nibbles) and 2k + 1 (high), in i16.
        let mut lo = [[_mm256_setzero_si256(); 2]; T];
        let mut hi = [[_mm256_setzero_si256(); 2]; T];
        for q in 0..8 {
            let at = Q4K_QS + 64 * (8 * k + q);
            let g = [ld256(&blk[at..]), ld256(&blk[at + 32..])];
            let wl = g.map(|v| _mm256_and_si256(v, m4));
            let wh = g.map(|v| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
            for t in 0..T {
                let al = _mm256_set1_epi32(quad(y[t], 64 * k + 4 * q));
                let ah = _mm256_set1_epi32(quad(y[t], 64 * k + 32 + 4 * q));
                for h in 0..2 {
                    lo[t][h] = add_dot16(lo[t][h], wl[h], al);
                    hi[t][h] = add_dot16(hi[t][h], wh[h], ah);
                }
            }
        }
        let s_lo = [
            dup::<false, false>(sc[2 * k]),
            dup::<true, false>(sc[2 * k]),
        ];
        let s_hi = [
            dup::<false, false>(sc[2 * k + 1]),
            dup::<true, false>(sc[2 * k + 1]),
        ];
        for t in 0..T {
            for h in 0..2 {
                let s = _mm256_add_epi32(
                    _mm256_madd_epi16(lo[t][h], s_lo[h]),
                    _mm256_madd_epi16(hi[t][h], s_hi[h]),
                );
                isum[t][h] = _mm256_add_epi32(isum[t][h], s);
            }
        }
    }
    // Mins of sub-blocks 2j and 2j + 1 as the two i16 halves of lane r.
    let mn2: [[__m256i; 4]; 2] = [
        std::array::from_fn(|j| pairs::<false, false>(mn[2 * j], mn[2 * j + 1])),
        std::array::from_fn(|j| pairs::<true, false>(mn[2 * j], mn[2 * j + 1])),
    ];
    let d = [f16x8(&blk[..16]), f16x8(&blk[16..32])];
    let dmin = [f16x8(&blk[32..48]), f16x8(&blk[48..64])];
    for t in 0..T {
        let bs = bsum_pairs(y[t]).map(|p| _mm256_set1_epi32(p));
        let yd = _mm256_set1_ps(y[t].d);
        for h in 0..2 {
            let mut msum = _mm256_setzero_si256();
            for j in 0..4 {
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn2[h][j], bs[j]));
            }
            let a = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(isum[t][h]),
                _mm256_mul_ps(d[h], yd),
                acc[t][h],
            );
            acc[t][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin[h], yd), a);
        }
    }
}

/// [`block_q4_k`] for four tokens: the halves one after the other, so
/// that each register's nibbles are unpacked once for all four tokens
/// while the 8 i16 sums, 4 i32 sums and the weights fit the 16 ymm
/// registers. In cache (`kernels_matvec`, Q4_K 128x2048 at 8 tokens) 38.7
/// GB/s per token with both halves two tokens at a time, 41.2 this way;
/// one token at a time it is slower (27.1 against 31.7), and so is Q6_K
/// half by half (21 against 28.7 at 8 tokens), so those keep both halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block_q4_k_by_half<const T: usize>(
    blk: &[u8; Q4K_BLOCK],
    y: [&BlockQ8K; T],
    acc: &mut [[__m256; 2]; T],
) {
    let (sc, mn) = q4k_scales(blk);
    let m4 = _mm256_set1_epi8(0x0f);
    let ahead = blk.as_ptr().wrapping_add(PREFETCH_AHEAD);
    let bsums: [[__m256i; 4]; T] =
        std::array::from_fn(|t| bsum_pairs(y[t]).map(|p| _mm256_set1_epi32(p)));
    for h in 0..2 {
        let mut isum = [_mm256_setzero_si256(); T];
        for k in 0..4 {
            if h == 0 {
                prefetch(ahead.wrapping_add(k * Q4K_BLOCK / 4), Q4K_BLOCK / 4);
            }
            // Sub-blocks 2k (low nibbles) and 2k + 1 (high), in i16.
            let mut lo = [_mm256_setzero_si256(); T];
            let mut hi = [_mm256_setzero_si256(); T];
            for q in 0..8 {
                let g = ld256(&blk[Q4K_QS + 64 * (8 * k + q) + 32 * h..]);
                let wl = _mm256_and_si256(g, m4);
                let wh = _mm256_and_si256(_mm256_srli_epi16::<4>(g), m4);
                for t in 0..T {
                    let al = _mm256_set1_epi32(quad(y[t], 64 * k + 4 * q));
                    lo[t] = add_dot16(lo[t], wl, al);
                    let ah = _mm256_set1_epi32(quad(y[t], 64 * k + 32 + 4 * q));
                    hi[t] = add_dot16(hi[t], wh, ah);
                }
            }
            let (s_lo, s_hi) = if h == 0 {
                (
                    dup::<false, false>(sc[2 * k]),
                    dup::<false, false>(sc[2 * k + 1]),
                )
            } else {
                (
                    dup::<true, false>(sc[2 * k]),
                    dup::<true, false>(sc[2 * k + 1]),
                )
            };
            for t in 0..T {
                let s = _mm256_add_epi32(
                    _mm256_madd_epi16(lo[t], s_lo),
                    _mm256_madd_epi16(hi[t], s_hi),
                );
                isum[t] = _mm256_add_epi32(isum[t], s);
            }
        }
        // Mins of sub-blocks 2j and 2j + 1 as the two i16 halves of lane r.
        let mn2: [__m256i; 4] = std::array::from_fn(|j| {
            if h == 0 {
                pairs::<false, false>(mn[2 * j], mn[2 * j + 1])
            } else {
                pairs::<true, false>(mn[2 * j], mn[2 * j + 1])
            }
        });
        let d = f16x8(&blk[16 * h..]);
        let dmin = f16x8(&blk[32 + 16 * h..]);
        for t in 0..T {
            let mut msum = _mm256_setzero_si256();
            for (m, b) in mn2.iter().zip(&bsums[t]) {
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*m, *b));
            }
            let yd = _mm256_set1_ps(y[t].d);
            let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, yd), acc[t][h]);
            acc[t][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, yd), a);
        }
    }
}

/// One Q6_K block (`q`: its quants, `hd`: its header) against `T` tokens:
/// adds row `8 h + r` · token `t`'s share of this super-block to lane `r`
/// of `acc[t][h]`. `ahead` are the four quarters of quants to prefetch
/// (see [`Q6kStream`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block_q6_k<const T: usize>(
    q: &[u8; Q6K_QUANTS],
    hd: &[u8; Q6K_HEADER],
    ahead: [*const u8; 4],
    y: [&BlockQ8K; T],
    acc: &mut [[__m256; 2]; T],
) {
    let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    let groups: [__m128i; 16] = std::array::from_fn(|s| ld128(&hd[32 + 16 * s..]));
    let scale: [[__m256i; 2]; 16] =
        std::array::from_fn(|s| [dup::<false, true>(groups[s]), dup::<true, true>(groups[s])]);
    let mut isum = [[_mm256_setzero_si256(); 2]; T];
    for n in 0..2 {
        for h4 in 0..2 {
            prefetch(ahead[2 * n + h4], Q6K_QUANTS / 4);
            // Registers c = 4 h4 ..4 h4 + 4 of the four 32-weight runs i
            // hold sub-blocks s = 8 n + 2 i + h4; two registers at a time
            // keep the i16 sums from saturating.
            for pair in 0..2 {
                for h in 0..2 {
                    let mut d16 = [[_mm256_setzero_si256(); 4]; T];
                    for qq in 2 * pair..2 * pair + 2 {
                        let c = 4 * h4 + qq;
                        let a = ld256(&q[64 * (16 * n + c) + 32 * h..]);
                        let b = ld256(&q[64 * (16 * n + 8 + c) + 32 * h..]);
                        let hb = ld256(&q[Q6K_QH + 64 * (8 * n + c) + 32 * h..]);
                        let w = [
                            _mm256_or_si256(
                                _mm256_and_si256(a, m4),
                                _mm256_and_si256(_mm256_slli_epi16::<4>(hb), m2),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(b, m4),
                                _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m2),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(a), m4),
                                _mm256_and_si256(hb, m2),
                            ),
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16::<4>(b), m4),
                                _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m2),
                            ),
                        ];
                        for (i, wi) in w.into_iter().enumerate() {
                            for t in 0..T {
                                let yq = _mm256_set1_epi32(quad(y[t], 128 * n + 32 * i + 4 * c));
                                d16[t][i] = add_dot16(d16[t][i], wi, yq);
                            }
                        }
                    }
                    for t in 0..T {
                        for (i, di) in d16[t].iter().enumerate() {
                            let s = 8 * n + 2 * i + h4;
                            let v = _mm256_madd_epi16(*di, scale[s][h]);
                            isum[t][h] = _mm256_add_epi32(isum[t][h], v);
                        }
                    }
                }
            }
        }
    }
    // sum_s sc_s (dot_s - 32 bsum_s): the bsum part as scale pairs against
    // broadcast bsum pairs.
    let sp: [[__m256i; 8]; 2] = [
        std::array::from_fn(|j| pairs::<false, true>(groups[2 * j], groups[2 * j + 1])),
        std::array::from_fn(|j| pairs::<true, true>(groups[2 * j], groups[2 * j + 1])),
    ];
    let d = [f16x8(&hd[..16]), f16x8(&hd[16..32])];
    for t in 0..T {
        let bs = |j: usize| _mm256_set1_epi32(bsum_pair(y[t], j));
        let yd = _mm256_set1_ps(y[t].d);
        for h in 0..2 {
            let mut msum = _mm256_setzero_si256();
            for (j, s) in sp[h].iter().enumerate() {
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*s, bs(j)));
            }
            let v = _mm256_sub_epi32(isum[t][h], _mm256_slli_epi32::<5>(msum));
            acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(d[h], yd), acc[t][h]);
        }
    }
}

/// Register `c` (0..8) of run `i` of sub-block rows `128 n ..128 n + 128`
/// of a Q6_K block's quants `q`, half `h`: the unsigned 6-bit quants of
/// rows `8 h ..8 h + 8`, four per lane, rebuilt from `ql` and `qh`.
/// [`block_q6_k`] rebuilds the four runs of a register inline from one
/// load each of `ql` and `qh`: built from this function instead it ran 5%
/// slower at two tokens (8-token chunks, 30.4 against 28.9 GB/s per
/// token), though 11% faster at one token in cache (19.9 against 22.1) and
/// the same at one token from DRAM, the decode case.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6k_weights(q: &[u8; Q6K_QUANTS], h: usize, n: usize, i: usize, c: usize) -> __m256i {
    let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    let l = ld256(&q[64 * (16 * n + 8 * (i % 2) + c) + 32 * h..]);
    let hb = ld256(&q[Q6K_QH + 64 * (8 * n + c) + 32 * h..]);
    let low = if i < 2 {
        _mm256_and_si256(l, m4)
    } else {
        _mm256_and_si256(_mm256_srli_epi16::<4>(l), m4)
    };
    // Bits 2 i ..2 i + 2 of `qh` to bits 4..6.
    let high = match i {
        0 => _mm256_slli_epi16::<4>(hb),
        1 => _mm256_slli_epi16::<2>(hb),
        2 => hb,
        _ => _mm256_srli_epi16::<2>(hb),
    };
    _mm256_or_si256(low, _mm256_and_si256(high, m2))
}

/// Registers of one half of a Q6_K panel block as [`unpack_q6k_panel`]
/// leaves them: the 64 quant registers in the order
/// [`block_q6_k_unpacked`] reads them, the 16 sub-block scales of lane `r`
/// as [`dup`] spreads them, then the 8 scale pairs of the bsum term (see
/// [`block_q6_k`]).
const Q6K_HALF: usize = 64 + 16 + 8;
/// Registers of one unpacked Q6_K panel block (both halves).
const Q6K_UNPACKED: usize = 2 * Q6K_HALF;

/// [`block_q6_k`] for four tokens, on the block unpacked (`regs`, see
/// [`Q6K_HALF`]), half by half and one sub-block run at a time, so that the
/// four tokens' i16 and i32 sums, a register and the broadcast activations
/// fit the 16 ymm registers. The multiply pipe bounds it: one `vpmaddubsw`
/// per register and token, a `vpmaddwd` per two.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block_q6_k_unpacked<const T: usize>(
    regs: &[__m256i; Q6K_UNPACKED],
    hd: &[u8; Q6K_HEADER],
    y: [&BlockQ8K; T],
    acc: &mut [[__m256; 2]; T],
) {
    for (h, half) in regs.chunks_exact(Q6K_HALF).enumerate() {
        let Ok(half) = <&[__m256i; Q6K_HALF]>::try_from(half) else {
            return;
        };
        let mut isum = [_mm256_setzero_si256(); T];
        q6k_step::<T, 0, 0>(half, y, &mut isum);
        q6k_step::<T, 0, 1>(half, y, &mut isum);
        q6k_step::<T, 1, 0>(half, y, &mut isum);
        q6k_step::<T, 1, 1>(half, y, &mut isum);
        let d = f16x8(&hd[16 * h..]);
        for t in 0..T {
            let mut msum = _mm256_setzero_si256();
            for j in 0..8 {
                let b = _mm256_set1_epi32(bsum_pair(y[t], j));
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(half[80 + j], b));
            }
            let v = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(msum));
            let yd = _mm256_set1_ps(y[t].d);
            acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(d, yd), acc[t][h]);
        }
    }
}

/// Adds the products of sub-blocks `8 N + 2 i + H4` (`i` in 0..4) of a
/// half of [`block_q6_k_unpacked`] to `isum`: registers
/// `16 (2 N + H4) + 4 i + c` of `half` against activation bytes
/// `128 N + 16 H4 + 32 i + 4 c..`, the sums of each `i` times its scale
/// pairs. Two registers at a time keep the i16 sums from saturating. (`N`
/// and `H4` are constants so that every index is, and no bounds check is
/// left in the loop.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6k_step<const T: usize, const N: usize, const H4: usize>(
    half: &[__m256i; Q6K_HALF],
    y: [&BlockQ8K; T],
    isum: &mut [__m256i; T],
) {
    for i in 0..4 {
        let sc = half[64 + 8 * N + 2 * i + H4];
        for pair in 0..2 {
            let mut d16 = [_mm256_setzero_si256(); T];
            for c in 2 * pair..2 * pair + 2 {
                let w = half[16 * (2 * N + H4) + 4 * i + c];
                for t in 0..T {
                    let a = _mm256_set1_epi32(quad(y[t], 128 * N + 16 * H4 + 32 * i + 4 * c));
                    d16[t] = add_dot16(d16[t], w, a);
                }
            }
            for t in 0..T {
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(d16[t], sc));
            }
        }
    }
}

/// `bsums[2 j]` in the low and `bsums[2 j + 1]` in the high 16 bits (one
/// load: the two are adjacent).
#[inline(always)]
fn bsum_pair(y: &BlockQ8K, j: usize) -> i32 {
    let b = &y.bsums[2 * j..2 * j + 2];
    (u32::from(b[0] as u16) | (u32::from(b[1] as u16) << 16)) as i32
}

/// Every Q6_K register of a panel's `nb` blocks as [`q6k_weights`]
/// rebuilds it, with the blocks' scale registers, into `out`
/// ([`Q6K_UNPACKED`] per block, in the order [`block_q6_k_unpacked`] reads
/// them): a prefill chunk reads them once per four tokens.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q6k_panel(panel: &[u8], nb: usize, out: &mut Vec<__m256i>) {
    out.clear();
    let (quants, headers) = panel.split_at(nb * Q6K_QUANTS);
    for (q, hd) in quants
        .chunks_exact(Q6K_QUANTS)
        .zip(headers.chunks_exact(Q6K_HEADER))
    {
        let Ok(q) = q.try_into() else { return };
        let groups: [__m128i; 16] = std::array::from_fn(|s| ld128(&hd[32 + 16 * s..]));
        for h in 0..2 {
            for n in 0..2 {
                for h4 in 0..2 {
                    for i in 0..4 {
                        for c in 4 * h4..4 * h4 + 4 {
                            out.push(q6k_weights(q, h, n, i, c));
                        }
                    }
                }
            }
            for g in groups {
                out.push(if h == 0 {
                    dup::<false, true>(g)
                } else {
                    dup::<true, true>(g)
                });
            }
            for j in 0..8 {
                let (a, b) = (groups[2 * j], groups[2 * j + 1]);
                out.push(if h == 0 {
                    pairs::<false, true>(a, b)
                } else {
                    pairs::<true, true>(a, b)
                });
            }
        }
    }
}

/// Prefetches the `len` bytes at `p` (see `avx512_packed_k::prefetch`).
/// Prefetching never faults, so running past the end of the panels is
/// harmless. LLVM schedules `_mm_prefetch` freely (it touches no memory
/// the compiler sees): the block loops stay rolled because in a fully
/// unrolled Q6_K block it moved every prefetch below the last multiply,
/// and two threads streamed 16 GB/s from DRAM instead of 25; pinned in
/// place with `asm!`, both K-quant kernels were slower than with LLVM's
/// placement (docs/BENCHMARKS.md, the ninth issue-18 session).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch(p: *const u8, len: usize) {
    for l in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(l).cast());
    }
}

/// Where a Q6_K panel's decode prefetches. The panel is its quants, then
/// its headers, then the next panel, so addresses a fixed distance past a
/// block's quants would land in the headers at a panel's end (already
/// being read) and leave the next panel's first quants to demand misses:
/// the quants are prefetched as one stream that skips the headers, and
/// each block's header one block ahead, the next panel's first at the
/// last block. Two threads from DRAM (`kernels_matvec` "threads" rows,
/// GB/s, three alternating runs): Q6_K 151936x2048 23.6-24.5 -> 24.8-25.5;
/// 128256x4096, twice the blocks per panel, 25.9-26.7 either way.
struct Q6kStream<'a> {
    /// The panel being read (the next one follows it in memory).
    panel: &'a [u8],
    nb: usize,
}

impl Q6kStream<'_> {
    /// The four quarters of quants to prefetch while block `b` is read:
    /// [`PREFETCH_AHEAD`] bytes further on in the quant stream.
    fn quants_ahead(&self, b: usize) -> [*const u8; 4] {
        let (quants, base) = (self.nb * Q6K_QUANTS, self.panel.as_ptr());
        std::array::from_fn(|k| {
            let at = b * Q6K_QUANTS + PREFETCH_AHEAD + k * (Q6K_QUANTS / 4);
            let at = if at < quants {
                at
            } else {
                at + self.panel.len() - quants
            };
            base.wrapping_add(at)
        })
    }

    /// The header read after block `b`'s.
    fn header_after(&self, b: usize) -> *const u8 {
        let quants = self.nb * Q6K_QUANTS;
        let at = if b + 1 < self.nb {
            quants + (b + 1) * Q6K_HEADER
        } else {
            self.panel.len() + quants
        };
        self.panel.as_ptr().wrapping_add(at)
    }
}

/// The packed K-quant types, as const generic parameters.
const Q4K: u8 = 0;
const Q6K: u8 = 1;

/// One panel of `nb` blocks of type `K` against `T` tokens (`nb` blocks
/// each): lane `r` of `result[t][h]` is row `8 h + r` · token `t`. A Q6_K
/// panel's quants come from `unpacked` when it is not empty (see
/// [`unpack_q6k_panel`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn panel<const K: u8, const T: usize>(
    panel: &[u8],
    unpacked: &[__m256i],
    nb: usize,
    y: [&[BlockQ8K]; T],
) -> [[__m256; 2]; T] {
    let mut acc = [[_mm256_setzero_ps(); 2]; T];
    if K == Q4K {
        for (b, blk) in panel.chunks_exact(Q4K_BLOCK).enumerate() {
            if let Ok(blk) = blk.try_into() {
                if T == 4 {
                    block_q4_k_by_half::<T>(blk, y.map(|yt| &yt[b]), &mut acc);
                } else {
                    block_q4_k::<T>(blk, y.map(|yt| &yt[b]), &mut acc);
                }
            }
        }
    } else {
        let (quants, headers) = panel.split_at(nb * Q6K_QUANTS);
        let stream = Q6kStream { panel, nb };
        for (b, (q, h)) in quants
            .chunks_exact(Q6K_QUANTS)
            .zip(headers.chunks_exact(Q6K_HEADER))
            .enumerate()
        {
            let (Ok(q), Ok(hd)) = (<&[u8; Q6K_QUANTS]>::try_from(q), h.try_into()) else {
                continue;
            };
            let yb = y.map(|yt| &yt[b]);
            let regs = unpacked.get(Q6K_UNPACKED * b..Q6K_UNPACKED * (b + 1));
            if let (4, Some(Ok(regs))) = (T, regs.map(<&[__m256i; Q6K_UNPACKED]>::try_from)) {
                block_q6_k_unpacked::<T>(regs, hd, yb, &mut acc);
            } else {
                prefetch(stream.header_after(b), Q6K_HEADER);
                block_q6_k::<T>(q, hd, stream.quants_ahead(b), yb, &mut acc);
            }
        }
    }
    acc
}

/// Writes a panel's results for tokens `t0..t0 + T` (rows past `n_rows`
/// dropped).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn store<const T: usize>(
    res: [[__m256; 2]; T],
    o: &mut PanelOut<'_>,
    n_rows: usize,
    p: usize,
    t0: usize,
) {
    let n = PANEL.min(n_rows - p * PANEL);
    let mut tmp = [[0.0f32; PANEL]; T];
    for (d, v) in tmp.iter_mut().zip(res) {
        let (a, b) = d.split_at_mut(8);
        // SAFETY: `a` and `b` are 8 writable f32 each; `storeu` is unaligned.
        unsafe {
            _mm256_storeu_ps(a.as_mut_ptr(), v[0]);
            _mm256_storeu_ps(b.as_mut_ptr(), v[1]);
        }
    }
    for (t, v) in tmp.iter().enumerate() {
        o.put(t0 + t, p * PANEL, &v[..n]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn products_as<const K: u8>(
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[BlockQ8K],
    o: &mut PanelOut<'_>,
) {
    let n_tok = a.len() / nb;
    let ty = if K == Q4K {
        GgmlType::Q4K
    } else {
        GgmlType::Q6K
    };
    let pb = panel_bytes(ty, nb);
    if !o.fits(n_rows, n_tok) {
        return;
    }
    let row = |t: usize| &a[t * nb..(t + 1) * nb];
    let n_panels = n_rows.div_ceil(PANEL).min(panels.len() / pb);
    let mut unpacked = Vec::new();
    for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
        let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
        for p in 0..n_panels {
            let pw = &panels[p * pb..(p + 1) * pb];
            unpacked.clear();
            if K == Q6K && c1 - c0 >= UNPACK_MIN_TOKENS {
                unpack_q6k_panel(pw, nb, &mut unpacked);
            }
            let mut t = c0;
            while (K == Q4K || !unpacked.is_empty()) && t + 4 <= c1 {
                let y = [row(t), row(t + 1), row(t + 2), row(t + 3)];
                store(panel::<K, 4>(pw, &unpacked, nb, y), o, n_rows, p, t);
                t += 4;
            }
            while t + 2 <= c1 {
                store(
                    panel::<K, 2>(pw, &[], nb, [row(t), row(t + 1)]),
                    o,
                    n_rows,
                    p,
                    t,
                );
                t += 2;
            }
            if t < c1 {
                store(panel::<K, 1>(pw, &[], nb, [row(t)]), o, n_rows, p, t);
            }
        }
    }
}

/// Packed K-quant products (see `packed_k::products`).
pub(super) fn packed_products_k(
    ty: GgmlType,
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[BlockQ8K],
    o: &mut PanelOut<'_>,
) {
    if nb == 0 {
        return;
    }
    // SAFETY: only reachable through the AVX2 table (the AVX-512 ones set
    // their own `packed_k`), which `avx2_table` returns after detecting
    // AVX2, FMA and F16C, every feature `products_as` is
    // compiled for.
    unsafe {
        match ty {
            GgmlType::Q4K => products_as::<Q4K>(panels, nb, n_rows, a, o),
            GgmlType::Q6K => products_as::<Q6K>(panels, nb, n_rows, a, o),
            _ => {}
        }
    }
}
