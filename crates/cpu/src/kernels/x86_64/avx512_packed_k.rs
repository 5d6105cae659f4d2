//! AVX-512 VNNI products of Q4_K and Q6_K weights packed once at load
//! (layouts in `kernels/packed_k.rs`): per panel block the 16 rows' scales
//! are unpacked with 128-bit byte operations (lane = row), and every
//! register of unsigned quants (Q4_K: a register's low or high nibbles;
//! Q6_K: nibbles of `ql` with two bits of `qh` above them, `q + 32`) takes
//! one `vpdpbusd` against four signed activation bytes, shared by up to
//! four tokens. In a prefill chunk the Q4_K scales, widened to i32 lanes,
//! and the tokens' sub-block sums are prepared once for all its four-token
//! groups. Scalar twin: `packed_k::products` (bit for bit).

use super::super::packed_k::{panel_bytes, Q4K_BLOCK, Q4K_QS, Q6K_HEADER, Q6K_QH, Q6K_QUANTS};
use super::super::PanelOut;
use super::avx2::{ld128, ld256};
use super::avx2_packed_k::q4k_scales;
use super::avx2_panel_k::{bsum_pairs, quad};
use super::avx512_panel::{ld512, store, PANEL};
use anedvd_base::GgmlType;
use anedvd_quant::BlockQ8K;
use std::arch::x86_64::*;

/// Tokens per chunk (activations of one chunk stay in L2).
const TOKEN_CHUNK: usize = 64;
/// Bytes prefetched ahead of the block being read. Dense Q4_K_M decode
/// (the 2.7B twin of docs/BENCHMARKS.md, 2 threads, Intel host) ran at
/// 14.4 / 15.1 / 15.2 / 14.9 / 12.3 / 12.2 tok/s with 256 / 512 / 1024 /
/// 2048 / 4096 (the legacy types' distance) / 8192 bytes. On the Zen 5
/// host 2048 streams faster: the 94 MB Q4_K 81920x2048 matvec, one thread,
/// 26.5-28.5 / 34.7-35.0 / 34.5-36.2 GB/s at 1024 / 2048 / 4096 bytes,
/// two threads 43.0-43.4 / 48.1-50.0 / 48.4-58.1; Llama-3.2-1B-shaped
/// decode (2 threads, medians of 5 alternating runs) 47.9 / 50.1 / 49.6
/// tok/s, the Qwen2.5-3B-shaped file 18.4 / 19.0 / 17.6.
///
/// Each block prefetches its share a quarter at a time between its steps,
/// not all at its start (36 lines at once for a Q4_K block, 48 for Q6_K
/// quants, more misses than a core keeps in flight): on the Zen 5 host the
/// Llama-3.2-1B-shaped decode went 47.2-50.4 -> 49.7-53.6 tok/s (five
/// alternating pairs), the Q4_K 81920x2048 product at 8 tokens 94-104 ->
/// 100-106 GB/s per token and the Q6_K 151936x2048 one 80-82 -> 89-93.
pub(super) const PREFETCH_AHEAD: usize = 2048;

/// [`PREFETCH_AHEAD`] in the Zen 4 table (`avx512::ZEN4_VNNI`), whose cores
/// keep fewer bytes in flight at 2048 than they stream: the Q4_K 81920x2048
/// product (94 MB) ran 17.1-19.2 / 18.0-20.6 / 19.0-20.3 / 19.9-20.4 GB/s on
/// one thread at 2048 / 3072 / 4096 / 8192 bytes, 23.3-27.4 / 22.9-30.9 /
/// 28.6-31.5 / 27.7-33.2 on two (three alternating runs each), and
/// Llama-3.2-1B-shaped decode at 4096 was faster in 4 of 6 alternating
/// pairs (32.1-33.1 -> 34.7-35.4 tok/s in the last four). On the Intel host
/// above 4096 lost 17%, on Zen 5 it lost on the 3B file.
pub(super) const PREFETCH_AHEAD_FAR: usize = 4096;

/// A Q4_K panel block's 16 rows' sub-block scales (one i32 per row, the
/// `vpmulld` operands) and mins in pairs (sub-blocks 2j and 2j + 1 as the
/// two 16-bit halves of a row's lane, the `vpdpwssd` operands).
#[derive(Clone, Copy)]
struct Q4kScales {
    sc: [__m512i; 8],
    mn2: [__m512i; 4],
}

impl Q4kScales {
    /// Unpacks panel block `blk`'s scales and mins.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    fn of(blk: &[u8]) -> Self {
        let (sc8, mn8) = q4k_scales(blk);
        let mut sc = [_mm512_setzero_si512(); 8];
        for (s, v) in sc.iter_mut().zip(sc8) {
            *s = _mm512_cvtepu8_epi32(v);
        }
        let mut mn2 = [_mm512_setzero_si512(); 4];
        for (j, m) in mn2.iter_mut().enumerate() {
            let (even, odd) = (mn8[2 * j], mn8[2 * j + 1]);
            *m = _mm512_or_si512(
                _mm512_cvtepu8_epi32(even),
                _mm512_slli_epi32::<16>(_mm512_cvtepu8_epi32(odd)),
            );
        }
        Self { sc, mn2 }
    }
}

/// One panel block against `T` tokens: adds row `r` · token `t`'s share
/// of this super-block to lane `r` of `acc[t]`.
///
/// `vpdpbusd`, `vpmulld` and `vpdpwssd` share two pipes here (Zen 5:
/// each issues two a cycle, `vpdpbusd` takes 4 cycles), so the mins
/// go through `vpdpwssd`, two sub-blocks per instruction (mins are 6-bit,
/// a sub-block's activation sum fits 16 bits), not one `vpmulld` each:
/// the Q4_K 1408x2048 product at 64 tokens 9.2-9.6 -> 8.7-8.9 us/token
/// (`kernels_matvec`, alternating builds). Splitting each sum into two
/// chains (even and odd quads) or taking 5, 6 or 8 tokens at a time ran
/// out of registers and was slower.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn block_q4_k<const T: usize, const AHEAD: usize>(
    blk: &[u8],
    scales: &Q4kScales,
    pairs: [&[i32; 4]; T],
    y: [&BlockQ8K; T],
    acc: &mut [__m512; T],
) {
    let sc = &scales.sc;
    let m4 = _mm512_set1_epi8(0x0f);
    let mut isum = [_mm512_setzero_si512(); T];
    let ahead = blk.as_ptr().wrapping_add(AHEAD);
    for k in 0..4 {
        // A quarter of the block `AHEAD` bytes on per quarter read.
        prefetch(ahead.wrapping_add(k * Q4K_BLOCK / 4), Q4K_BLOCK / 4);
        let mut lo = [_mm512_setzero_si512(); T];
        let mut hi = [_mm512_setzero_si512(); T];
        for q in 0..8 {
            let g = ld512(&blk[Q4K_QS + 64 * (8 * k + q)..]);
            let wl = _mm512_and_si512(g, m4);
            let wh = _mm512_and_si512(_mm512_srli_epi16::<4>(g), m4);
            for t in 0..T {
                let (al, ah) = (quad(y[t], 64 * k + 4 * q), quad(y[t], 64 * k + 32 + 4 * q));
                lo[t] = _mm512_dpbusd_epi32(lo[t], wl, _mm512_set1_epi32(al));
                hi[t] = _mm512_dpbusd_epi32(hi[t], wh, _mm512_set1_epi32(ah));
            }
        }
        for t in 0..T {
            let s = _mm512_add_epi32(
                _mm512_mullo_epi32(lo[t], sc[2 * k]),
                _mm512_mullo_epi32(hi[t], sc[2 * k + 1]),
            );
            isum[t] = _mm512_add_epi32(isum[t], s);
        }
    }
    let d = _mm512_cvtph_ps(ld256(blk));
    let dmin = _mm512_cvtph_ps(ld256(&blk[32..]));
    for t in 0..T {
        let mut msum = _mm512_setzero_si512();
        for (m, &pair) in scales.mn2.iter().zip(pairs[t]) {
            msum = _mm512_dpwssd_epi32(msum, *m, _mm512_set1_epi32(pair));
        }
        let yd = _mm512_set1_ps(y[t].d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, yd), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, yd), acc[t]);
    }
}

/// One Q6_K block (`q`: its quants, `h`: its header) against `T` tokens:
/// adds row `r` · token `t`'s share of this super-block to lane `r` of
/// `acc[t]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn block_q6_k<const T: usize, const AHEAD: usize>(
    q: &[u8],
    h: &[u8],
    y: [&BlockQ8K; T],
    acc: &mut [__m512; T],
) {
    let (m4, m2) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    let mut isum = [_mm512_setzero_si512(); T];
    // A quarter of the quants `AHEAD` bytes on per quarter read.
    let (ahead, part) = (q.as_ptr().wrapping_add(AHEAD), Q6K_QUANTS / 4);
    for n in 0..2 {
        // Quads `4 h4 ..4 h4 + 4` of the four 32-weight runs of this half
        // are sub-blocks `8 n + 2 i + h4`.
        for h4 in 0..2 {
            prefetch(ahead.wrapping_add((2 * n + h4) * part), part);
            let mut d = [[_mm512_setzero_si512(); T]; 4];
            for qq in 0..4 {
                let c = 4 * h4 + qq;
                let a = ld512(&q[64 * (16 * n + c)..]);
                let b = ld512(&q[64 * (16 * n + 8 + c)..]);
                let hb = ld512(&q[Q6K_QH + 64 * (8 * n + c)..]);
                let w = [
                    _mm512_or_si512(
                        _mm512_and_si512(a, m4),
                        _mm512_and_si512(_mm512_slli_epi16::<4>(hb), m2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(b, m4),
                        _mm512_and_si512(_mm512_slli_epi16::<2>(hb), m2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(a), m4),
                        _mm512_and_si512(hb, m2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(b), m4),
                        _mm512_and_si512(_mm512_srli_epi16::<2>(hb), m2),
                    ),
                ];
                for (i, wi) in w.into_iter().enumerate() {
                    for t in 0..T {
                        let yq = quad(y[t], 128 * n + 32 * i + 4 * c);
                        d[i][t] = _mm512_dpbusd_epi32(d[i][t], wi, _mm512_set1_epi32(yq));
                    }
                }
            }
            for (i, di) in d.iter().enumerate() {
                let s = 8 * n + 2 * i + h4;
                let sc = _mm512_cvtepi8_epi32(ld128(&h[32 + 16 * s..]));
                for t in 0..T {
                    let off = _mm512_set1_epi32(32 * i32::from(y[t].bsums[s]));
                    let v = _mm512_mullo_epi32(sc, _mm512_sub_epi32(di[t], off));
                    isum[t] = _mm512_add_epi32(isum[t], v);
                }
            }
        }
    }
    let d = _mm512_cvtph_ps(ld256(h));
    for t in 0..T {
        let dy = _mm512_mul_ps(d, _mm512_set1_ps(y[t].d));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), dy, acc[t]);
    }
}

/// Prefetches the `len` bytes at `p`: few tokens stream the panels faster
/// than the hardware prefetcher fetches them (as for the legacy packed
/// types). Prefetching never faults, so running past the end of the
/// panels is harmless.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn prefetch(p: *const u8, len: usize) {
    for l in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(l).cast());
    }
}

/// The packed K-quant types, as const generic parameters.
const Q4K: u8 = 0;
const Q6K: u8 = 1;

/// A Q4_K panel's blocks' scales and `T` tokens' [`bsum_pairs`] per block,
/// unpacked once for every token group of a chunk rather than per group.
type Prepared<'a, const T: usize> = (&'a [Q4kScales], [&'a [[i32; 4]]; T]);

/// One panel of `nb` blocks of type `K` against `T` tokens (`nb` blocks
/// each): lane `r` of result `t` is row `r` · token `t`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn panel<const K: u8, const T: usize, const AHEAD: usize>(
    panel: &[u8],
    nb: usize,
    y: [&[BlockQ8K]; T],
    pre: Option<Prepared<'_, T>>,
) -> [__m512; T] {
    let mut acc = [_mm512_setzero_ps(); T];
    if K == Q4K {
        for (b, blk) in panel.chunks_exact(Q4K_BLOCK).enumerate() {
            let yb = y.map(|yt| &yt[b]);
            match pre {
                Some((scales, pairs)) => {
                    let pairs = pairs.map(|p| &p[b]);
                    block_q4_k::<T, AHEAD>(blk, &scales[b], pairs, yb, &mut acc);
                }
                None => {
                    let pairs = yb.map(bsum_pairs);
                    let pairs = std::array::from_fn(|t| &pairs[t]);
                    block_q4_k::<T, AHEAD>(blk, &Q4kScales::of(blk), pairs, yb, &mut acc);
                }
            }
        }
    } else {
        let (quants, headers) = panel.split_at(nb * Q6K_QUANTS);
        for b in 0..nb {
            let q = &quants[b * Q6K_QUANTS..(b + 1) * Q6K_QUANTS];
            let h = &headers[b * Q6K_HEADER..(b + 1) * Q6K_HEADER];
            // The headers (a tenth of the panel) one block ahead.
            prefetch(h.as_ptr().wrapping_add(Q6K_HEADER), Q6K_HEADER);
            block_q6_k::<T, AHEAD>(q, h, y.map(|yt| &yt[b]), &mut acc);
        }
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn products_as<const K: u8, const AHEAD: usize>(
    panels: &[u8],
    nb: usize,
    n_rows: usize,
    a: &[BlockQ8K],
    o: &mut PanelOut<'_>,
) {
    let n_tok = a.len() / nb;
    let pb = panel_bytes(
        if K == Q4K {
            GgmlType::Q4K
        } else {
            GgmlType::Q6K
        },
        nb,
    );
    if !o.fits(n_rows, n_tok) {
        return;
    }
    let row = |t: usize| &a[t * nb..(t + 1) * nb];
    let n_panels = n_rows.div_ceil(PANEL).min(panels.len() / pb);
    // Q4_K's scales and activation sums, unpacked once per panel and chunk
    // for its four-token groups rather than in every group (on the Zen 4
    // host: the 1408x2048 product at 64 tokens 88.5-90.5 -> 93.5-95.4 GB/s
    // per token, Llama-3.2-1B-shaped pp512 faster in 5 of 5 alternating
    // pairs, medians 220.6 -> 241.3 tok/s).
    let (mut scales, mut pairs) = (Vec::new(), Vec::new());
    for c0 in (0..n_tok).step_by(TOKEN_CHUNK) {
        let c1 = (c0 + TOKEN_CHUNK).min(n_tok);
        // A chunk of one to three tokens (decode) has no group to share them.
        let groups = K == Q4K && c1 - c0 >= 4;
        if groups {
            pairs.clear();
            pairs.extend(a[c0 * nb..c1 * nb].iter().map(bsum_pairs));
        }
        for p in 0..n_panels {
            let pw = &panels[p * pb..(p + 1) * pb];
            if groups {
                scales.clear();
                for blk in pw.chunks_exact(Q4K_BLOCK) {
                    scales.push(Q4kScales::of(blk));
                }
            }
            let mut t = c0;
            while t + 4 <= c1 {
                let y = [row(t), row(t + 1), row(t + 2), row(t + 3)];
                let pre = if groups {
                    let at = |i: usize| &pairs[(t - c0 + i) * nb..(t - c0 + i + 1) * nb];
                    Some((&scales[..], [at(0), at(1), at(2), at(3)]))
                } else {
                    None
                };
                store(panel::<K, 4, AHEAD>(pw, nb, y, pre), o, n_rows, p, t);
                t += 4;
            }
            match c1 - t {
                3 => {
                    let y = [row(t), row(t + 1), row(t + 2)];
                    store(panel::<K, 3, AHEAD>(pw, nb, y, None), o, n_rows, p, t);
                }
                2 => store(
                    panel::<K, 2, AHEAD>(pw, nb, [row(t), row(t + 1)], None),
                    o,
                    n_rows,
                    p,
                    t,
                ),
                1 => store(
                    panel::<K, 1, AHEAD>(pw, nb, [row(t)], None),
                    o,
                    n_rows,
                    p,
                    t,
                ),
                _ => {}
            }
        }
    }
}

/// Packed K-quant products (see `packed_k::products`), prefetching
/// `AHEAD` bytes ahead ([`PREFETCH_AHEAD`], or [`PREFETCH_AHEAD_FAR`] in the
/// Zen 4 table).
pub(super) fn packed_products_k<const AHEAD: usize>(
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
    // SAFETY: only reachable through the AVX-512 VNNI tables (both
    // tunings), which `avx512_table(true)` returns after detecting every
    // feature that `products_as` is compiled for.
    unsafe {
        match ty {
            GgmlType::Q4K => products_as::<Q4K, AHEAD>(panels, nb, n_rows, a, o),
            GgmlType::Q6K => products_as::<Q6K, AHEAD>(panels, nb, n_rows, a, o),
            _ => {}
        }
    }
}
