//! AVX2 + FMA + F16C kernels (after ggml's `__AVX2__` paths): integer dot
//! products with `maddubs`/`madd`, one f32 multiply-add per block.

use super::super::generic::{unpack_k4_scales, unpack_q3k_scales, KVALUES_IQ4NL};
use super::super::{Q8Block, Table};
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

// ---------------------------------------------------------------- helpers

/// Loads 32 bytes from the start of `s` (which must hold at least 32).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn ld256(s: &[u8]) -> __m256i {
    let s = &s[..32];
    // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// Loads 32 signed bytes from the start of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn ld256i(s: &[i8]) -> __m256i {
    let s = &s[..32];
    // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// Loads 16 bytes from the start of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn ld128(s: &[u8]) -> __m128i {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Loads 8 f32 from the start of `s`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn ld_ps(s: &[f32]) -> __m256 {
    let s = &s[..8];
    // SAFETY: `s` is 8 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// Little-endian u16 at byte `o`.
#[inline]
pub(super) fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// Little-endian u32 at byte `o`.
#[inline]
pub(super) fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// f16 bits to f32 with F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16v(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Sum of the 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum(v: __m256) -> f32 {
    hsum128(_mm_add_ps(
        _mm256_castps256_ps128(v),
        _mm256_extractf128_ps::<1>(v),
    ))
}

/// Sum of the 4 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum128(s: __m128) -> f32 {
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Unsigned × signed bytes, summed in groups of 4 into 8 f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn mul_sum_us8(ax: __m256i, sy: __m256i) -> __m256 {
    let dot = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)))
}

/// Signed × signed bytes (`y` in `[-127, 127]`), summed in groups of 4.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256 {
    mul_sum_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// 16 bytes of nibbles → 32 bytes: low nibbles then high nibbles.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn nibbles(s: &[u8]) -> __m256i {
    let t = ld128(s);
    let hi = _mm_srli_epi16::<4>(t);
    _mm256_and_si256(_mm256_set_m128i(hi, t), _mm256_set1_epi8(0x0f))
}

/// 32 bits → 32 bytes of `0xff` (bit set) or `0x00`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bytes_from_bits(bits: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, mask), _mm256_set1_epi64x(-1))
}

/// Two i16 scales: lanes 0-7 get `lo`, lanes 8-15 get `hi`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn scale_pair(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// IQ4_NL's 16 values in both 128-bit lanes: `vpshufb` of it by nibbles
/// gives the signed weights.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn iq4nl_values() -> __m256i {
    let k = KVALUES_IQ4NL;
    _mm256_broadcastsi128_si256(_mm_setr_epi8(
        k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10], k[11], k[12], k[13],
        k[14], k[15],
    ))
}

/// The signed weight bytes of one IQ4_NL block.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn signed_iq4_nl(x: &[u8]) -> __m256i {
    _mm256_shuffle_epi8(iq4nl_values(), nibbles(&x[2..]))
}

/// The signed weight bytes of one Q8_0 block.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn signed_q8_0(x: &[u8]) -> __m256i {
    ld256(&x[2..])
}

// ------------------------------------------------------- legacy × Q8_0/Q8_1

/// Dot of a row of blocks whose weights come out as signed bytes.
macro_rules! signed_dot {
    ($dot:ident, $bb:expr, $signed:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $dot(x: &[u8], y: &[Q8Block]) -> f32 {
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut it = x.chunks_exact($bb).zip(y);
            loop {
                let Some((x0, y0)) = it.next() else { break };
                let q = mul_sum_i8($signed(x0), ld256i(&y0.qs));
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16v(rd16(x0, 0)) * y0.d), q, acc0);
                let Some((x1, y1)) = it.next() else { break };
                let q = mul_sum_i8($signed(x1), ld256i(&y1.qs));
                acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16v(rd16(x1, 0)) * y1.d), q, acc1);
            }
            hsum(_mm256_add_ps(acc0, acc1))
        }
    };
}

signed_dot!(dot_q8_0, 34, signed_q8_0);

/// Weights offset to unsigned bytes `u = w + OFF` (`u <= 31`): the dot is
/// `sum(u * y) - OFF * sum(y)`, one `maddubs` and no sign fix-ups. Exact.
macro_rules! offset_dot {
    ($dot:ident, $bb:expr, $unsigned:ident, $off:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $dot(x: &[u8], y: &[Q8Block]) -> f32 {
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let ones = _mm256_set1_epi16(1);
            let block = |xb: &[u8], yb: &Q8Block, acc: __m256| {
                let p =
                    _mm256_madd_epi16(_mm256_maddubs_epi16($unsigned(xb), ld256i(&yb.qs)), ones);
                // OFF * isum spread over the 8 lanes (OFF is a multiple of 8).
                let p = _mm256_sub_epi32(p, _mm256_set1_epi32($off / 8 * yb.isum));
                let d = _mm256_set1_ps(f16v(rd16(xb, 0)) * yb.d);
                _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc)
            };
            let mut it = x.chunks_exact($bb).zip(y);
            loop {
                let Some((x0, y0)) = it.next() else { break };
                acc0 = block(x0, y0, acc0);
                let Some((x1, y1)) = it.next() else { break };
                acc1 = block(x1, y1, acc1);
            }
            hsum(_mm256_add_ps(acc0, acc1))
        }
    };
}

/// Q4_0 weights plus 8, in `[0, 15]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn unsigned_q4_0(x: &[u8]) -> __m256i {
    nibbles(&x[2..])
}

/// Q5_0 weights plus 16, in `[0, 31]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn unsigned_q5_0(x: &[u8]) -> __m256i {
    let hi = _mm256_and_si256(bytes_from_bits(rd32(x, 2)), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles(&x[6..]), hi)
}

offset_dot!(dot_q4_0, 18, unsigned_q4_0, 8);
offset_dot!(dot_q5_0, 22, unsigned_q5_0, 16);
signed_dot!(dot_iq4_nl, 18, signed_iq4_nl);

/// Unsigned weights (Q4_1, Q5_1) with a min: `d*sum + m*s` per block.
macro_rules! unsigned_dot {
    ($dot:ident, $bb:expr, $unsigned:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $dot(x: &[u8], y: &[Q8Block]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summs = 0.0f32;
            for (xb, yb) in x.chunks_exact($bb).zip(y) {
                let q = mul_sum_us8($unsigned(xb), ld256i(&yb.qs));
                acc = _mm256_fmadd_ps(_mm256_set1_ps(f16v(rd16(xb, 0)) * yb.d), q, acc);
                summs += f16v(rd16(xb, 2)) * yb.s;
            }
            hsum(acc) + summs
        }
    };
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn unsigned_q4_1(x: &[u8]) -> __m256i {
    nibbles(&x[4..])
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn unsigned_q5_1(x: &[u8]) -> __m256i {
    let hi = _mm256_and_si256(bytes_from_bits(rd32(x, 4)), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles(&x[8..]), hi)
}

unsigned_dot!(dot_q4_1, 20, unsigned_q4_1);
unsigned_dot!(dot_q5_1, 24, unsigned_q5_1);

// ------------------------------------------------------------ K-quants × Q8_K

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q2_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.chunks_exact(84).zip(y) {
        let dall = yb.d * f16v(rd16(xb, 80));
        let dmin = -yb.d * f16v(rd16(xb, 82));
        let sc = &xb[0..16];
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(
            _mm_srli_epi16::<4>(ld128(sc)),
            _mm_set1_epi8(0x0f),
        ));
        // SAFETY: `bsums` is 16 i16 = 32 readable bytes; unaligned load.
        let bsums = unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) };
        let prod = _mm256_madd_epi16(mins, bsums);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let q2bits = ld256(&xb[16 + 32 * j..]);
            let mut bits = q2bits;
            for s in 0..4 {
                let q2 = _mm256_and_si256(bits, m3);
                bits = _mm256_srli_epi16::<2>(bits);
                let q8 = ld256i(&yb.qs[128 * j + 32 * s..]);
                let i = 8 * j + 2 * s;
                let sp = scale_pair(i16::from(sc[i] & 0xf), i16::from(sc[i + 1] & 0xf));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q2, q8), sp);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q3_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let (m3, one, four) = (
        _mm256_set1_epi8(3),
        _mm256_set1_epi8(1),
        _mm256_set1_epi8(4),
    );
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.chunks_exact(110).zip(y) {
        let d = f16v(rd16(xb, 108)) * yb.d;
        let sc = unpack_q3k_scales(&xb[96..108]);
        let mut hb = ld256(&xb[0..32]);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let mut bits = ld256(&xb[32 + 32 * j..]);
            for s in 0..4 {
                let hi = _mm256_slli_epi16::<2>(_mm256_and_si256(hb, one));
                hb = _mm256_srli_epi16::<1>(hb);
                let q3 = _mm256_or_si256(_mm256_and_si256(bits, m3), hi);
                bits = _mm256_srli_epi16::<2>(bits);
                let q8 = ld256i(&yb.qs[128 * j + 32 * s..]);
                let p =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q3, q8), _mm256_maddubs_epi16(four, q8));
                let i = 8 * j + 2 * s;
                let sp = scale_pair(i16::from(sc[i]), i16::from(sc[i + 1]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sp));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

/// Q4_K / Q5_K: `mins · bsums` for one block, as 4 i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn k4_mins(sm: &[u8; 16], yb: &BlockQ8K) -> __m128i {
    let mins = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(sm_hi(sm))));
    _mm_madd_epi16(mins, q8k_sub_sums(yb))
}

/// The activation's sums over each of a Q8_K block's eight 32-weight
/// sub-blocks, as i16.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn q8k_sub_sums(yb: &BlockQ8K) -> __m128i {
    // SAFETY: `bsums` is 16 i16 = 32 readable bytes; unaligned load.
    let bs = unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) };
    _mm_hadd_epi16(
        _mm256_castsi256_si128(bs),
        _mm256_extracti128_si256::<1>(bs),
    )
}

/// The 8 min bytes of an unpacked Q4_K/Q5_K scale array.
#[inline]
fn sm_hi(sm: &[u8; 16]) -> [u8; 8] {
    [sm[8], sm[9], sm[10], sm[11], sm[12], sm[13], sm[14], sm[15]]
}

/// Shared by Q4_K (`qh_off = None`) and Q5_K.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_k4_like<const BB: usize, const QS: usize, const FIVE: bool>(
    x: &[u8],
    y: &[BlockQ8K],
) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (xb, yb) in x.chunks_exact(BB).zip(y) {
        let d = yb.d * f16v(rd16(xb, 0));
        let dmin = -yb.d * f16v(rd16(xb, 2));
        let sm = unpack_k4_scales(&xb[4..16]);
        let prod = k4_mins(&sm, yb);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        let mut hb = if FIVE {
            ld256(&xb[16..48])
        } else {
            _mm256_setzero_si256()
        };
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q4bits = ld256(&xb[QS + 32 * j..]);
            let mut q4l = _mm256_and_si256(q4bits, m4);
            let mut q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4bits), m4);
            if FIVE {
                let hl = _mm256_slli_epi16::<4>(_mm256_and_si256(hb, one));
                let hh = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<1>(hb), one));
                hb = _mm256_srli_epi16::<2>(hb);
                q4l = _mm256_or_si256(q4l, hl);
                q4h = _mm256_or_si256(q4h, hh);
            }
            let q8l = ld256i(&yb.qs[64 * j..]);
            let q8h = ld256i(&yb.qs[64 * j + 32..]);
            let pl = _mm256_madd_epi16(
                _mm256_maddubs_epi16(q4l, q8l),
                _mm256_set1_epi16(i16::from(sm[2 * j])),
            );
            let ph = _mm256_madd_epi16(
                _mm256_maddubs_epi16(q4h, q8h),
                _mm256_set1_epi16(i16::from(sm[2 * j + 1])),
            );
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc) + hsum128(acc_m)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_k4_like::<144, 16, false>(x, y)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q5_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_k4_like::<176, 48, true>(x, y)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q6_k(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let (m4, m2, m32) = (
        _mm256_set1_epi8(0x0f),
        _mm256_set1_epi8(3),
        _mm256_set1_epi8(32),
    );
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.chunks_exact(210).zip(y) {
        let d = yb.d * f16v(rd16(xb, 208));
        let sc = &xb[192..208];
        let mut sumi = _mm256_setzero_si256();
        for c in 0..2 {
            let b1 = ld256(&xb[64 * c..]);
            let b2 = ld256(&xb[64 * c + 32..]);
            let hb = ld256(&xb[128 + 32 * c..]);
            let h = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
            let q = [
                _mm256_or_si256(_mm256_and_si256(b1, m4), h(hb)),
                _mm256_or_si256(_mm256_and_si256(b2, m4), h(_mm256_srli_epi16::<2>(hb))),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                    h(_mm256_srli_epi16::<4>(hb)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                    h(_mm256_srli_epi16::<6>(hb)),
                ),
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let q8 = ld256i(&yb.qs[128 * c + 32 * k..]);
                let p =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(qk, q8), _mm256_maddubs_epi16(m32, q8));
                let i = 8 * c + 2 * k;
                let sp = scale_pair(i16::from(sc[i] as i8), i16::from(sc[i + 1] as i8));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sp));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_iq4_xs(x: &[u8], y: &[BlockQ8K]) -> f32 {
    let kv = iq4nl_values();
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.chunks_exact(136).zip(y) {
        let d = f16v(rd16(xb, 0)) * yb.d;
        let h = rd16(xb, 2);
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            let lo = (xb[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
            let ls = i16::from(lo | (((h >> (2 * ib)) & 3) as u8) << 4) - 32;
            let qx = _mm256_shuffle_epi8(kv, nibbles(&xb[8 + 16 * ib..]));
            let q8 = ld256i(&yb.qs[32 * ib..]);
            let p = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(q8, qx));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16(ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

// ------------------------------------------------------------- float × f32

/// Dot of `n` weights decoded 8 at a time by `$load` with f32 activations.
macro_rules! float_dot {
    ($dot:ident, $es:expr, $load:ident, $scalar:path) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $dot(w: &[u8], a: &[f32]) -> f32 {
            let n = (w.len() / $es).min(a.len());
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (k, acc) in acc.iter_mut().enumerate() {
                    let o = i + 8 * k;
                    *acc = _mm256_fmadd_ps($load(&w[o * $es..]), ld_ps(&a[o..]), *acc);
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps($load(&w[i * $es..]), ld_ps(&a[i..]), acc[0]);
                i += 8;
            }
            let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            hsum(s) + $scalar(&w[i * $es..n * $es], &a[i..n])
        }
    };
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_f32(w: &[u8]) -> __m256 {
    _mm256_castsi256_ps(ld256(w))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_f16(w: &[u8]) -> __m256 {
    _mm256_cvtph_ps(ld128(w))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_bf16(w: &[u8]) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(ld128(w))))
}

float_dot!(dot_f32, 4, load_f32, super::super::generic::dot_f32);
float_dot!(dot_f16, 2, load_f16, super::super::generic::dot_f16);
float_dot!(dot_bf16, 2, load_bf16, super::super::generic::dot_bf16);

#[target_feature(enable = "avx2,fma,f16c")]
fn f16_to_f32_inner(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / 2);
    let body = n / 8 * 8;
    for (d, w) in dst[..body].chunks_exact_mut(8).zip(src.chunks_exact(16)) {
        // SAFETY: `d` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), load_f16(w)) };
    }
    crate::kernels::f16_to_f32_scalar(&src[2 * body..2 * n], &mut dst[body..n]);
}

/// `crate::kernels::f16_to_f32` with F16C, 8 values per conversion.
pub(super) fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    // SAFETY: only handed out by `super::f16_to_f32_fn`, after detecting
    // AVX2, FMA and F16C.
    unsafe { f16_to_f32_inner(src, dst) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn axpy_f16_inner(y: &mut [f32], a: f32, x: &[u8]) {
    let n = y.len().min(x.len() / 2);
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        let yv = _mm256_fmadd_ps(av, load_f16(&x[2 * i..]), ld_ps(&y[i..]));
        let dst = &mut y[i..i + 8];
        // SAFETY: `dst` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), yv) };
        i += 8;
    }
    super::super::generic::axpy_f16(&mut y[i..n], a, &x[2 * i..2 * n]);
}

/// `y += a * x`, `x` f16 bytes, 8 lanes with F16C and FMA.
fn axpy_f16(y: &mut [f32], a: f32, x: &[u8]) {
    // SAFETY: only reachable through `TABLE`, which `avx2_table` returns
    // after detecting AVX2, FMA and F16C.
    unsafe { axpy_f16_inner(y, a, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn wsum_f16_inner(v: &[u8], stride: usize, p: &[f32], out: &mut [f32]) {
    let n = out.len();
    let mut i = 0;
    // 32 output values in four registers, accumulated over every row.
    while i + 32 <= n {
        let mut acc = [_mm256_setzero_ps(); 4];
        for (j, &pj) in p.iter().enumerate() {
            let row = &v[j * stride + 2 * i..j * stride + 2 * i + 64];
            let pv = _mm256_set1_ps(pj);
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(pv, load_f16(&row[16 * k..]), *a);
            }
        }
        for (k, a) in acc.iter().enumerate() {
            let dst = &mut out[i + 8 * k..i + 8 * k + 8];
            // SAFETY: `dst` is 8 writable f32; `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *a) };
        }
        i += 32;
    }
    while i + 8 <= n {
        let mut acc = _mm256_setzero_ps();
        for (j, &pj) in p.iter().enumerate() {
            let row = &v[j * stride + 2 * i..j * stride + 2 * i + 16];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(pj), load_f16(row), acc);
        }
        let dst = &mut out[i..i + 8];
        // SAFETY: `dst` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), acc) };
        i += 8;
    }
    if i < n {
        super::super::generic::wsum_f16(&v[2 * i..], stride, p, &mut out[i..]);
    }
}

/// Weighted sum of f16 rows, 32 outputs at a time in registers.
fn wsum_f16(v: &[u8], stride: usize, p: &[f32], out: &mut [f32]) {
    // SAFETY: only reachable through `TABLE`, which `avx2_table` returns
    // after detecting AVX2, FMA and F16C.
    unsafe { wsum_f16_inner(v, stride, p, out) }
}

// ------------------------------------------------------------------- table

/// A safe row loop around a `#[target_feature]` dot.
macro_rules! rows {
    ($($rows:ident, $inner:ident => $dot:ident : $a:ty;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $inner(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            if rb == 0 {
                return;
            }
            for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
                *o = $dot(row, a);
            }
        }

        fn $rows(w: &[u8], rb: usize, a: &[$a], out: &mut [f32]) {
            // SAFETY: only reachable through `TABLE`, which `avx2_table`
            // returns after detecting AVX2, FMA and F16C.
            unsafe { $inner(w, rb, a, out) }
        }
    )*};
}

rows! {
    rows_q8_0, inner_q8_0 => dot_q8_0: Q8Block;
    rows_q4_0, inner_q4_0 => dot_q4_0: Q8Block;
    rows_q4_1, inner_q4_1 => dot_q4_1: Q8Block;
    rows_q5_0, inner_q5_0 => dot_q5_0: Q8Block;
    rows_q5_1, inner_q5_1 => dot_q5_1: Q8Block;
    rows_iq4_nl, inner_iq4_nl => dot_iq4_nl: Q8Block;
    rows_q2_k, inner_q2_k => dot_q2_k: BlockQ8K;
    rows_q3_k, inner_q3_k => dot_q3_k: BlockQ8K;
    rows_q4_k, inner_q4_k => dot_q4_k: BlockQ8K;
    rows_q5_k, inner_q5_k => dot_q5_k: BlockQ8K;
    rows_q6_k, inner_q6_k => dot_q6_k: BlockQ8K;
    rows_iq4_xs, inner_iq4_xs => dot_iq4_xs: BlockQ8K;
    rows_f32, inner_f32 => dot_f32: f32;
    rows_f16, inner_f16 => dot_f16: f32;
    rows_bf16, inner_bf16 => dot_bf16: f32;
}

/// The AVX2 kernels.
pub(super) const TABLE: Table = Table {
    q4_0: rows_q4_0,
    q4_1: rows_q4_1,
    q5_0: rows_q5_0,
    q5_1: rows_q5_1,
    q8_0: rows_q8_0,
    iq4_nl: rows_iq4_nl,
    q2_k: rows_q2_k,
    q3_k: rows_q3_k,
    q4_k: rows_q4_k,
    q5_k: rows_q5_k,
    q6_k: rows_q6_k,
    iq4_xs: rows_iq4_xs,
    f32: rows_f32,
    f16: rows_f16,
    bf16: rows_bf16,
    x4_q8_0: Some(super::avx2_x4::Q8_0),
    x4_iq4_nl: Some(super::avx2_x4::IQ4_NL),
    panel_q4_0: Some(super::avx2_panel::panel_q4_0),
    panel_q5_0: Some(super::avx2_panel::panel_q5_0),
    panel_q4_k: Some(super::avx2_panel_k::panel_q4_k),
    panel_q6_k: Some(super::avx2_panel_k::panel_q6_k),
    pack: super::avx2_packed::pack,
    packed: Some(super::avx2_packed::packed_products),
    packed_k: Some(super::avx2_packed_k::packed_products_k),
    gemm_f32: Some(super::avx2_attn::gemm_f32),
    axpy_f16,
    wsum_f16,
    dot_f16_multi: super::avx2_attn::dot_f16_multi,
    wsum_f16_multi: super::avx2_attn::wsum_f16_multi,
    ..Table::GENERIC
};
