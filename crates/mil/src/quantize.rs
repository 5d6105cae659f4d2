//! Weight compression math: per-row int8 and palettized (LUT) weights, the
//! two forms the e5rt evidence shows streaming compressed
//! (`constexpr_affine_dequantize`, `constexpr_lut_to_dense`;
//! ane-evidence.md §a). The blob writer ([`crate::blob`]) packs the result
//! and the simulator decompresses it as coremltools does.
//!
//! Written by hand because it is part of the lowering: the palettes are a
//! 1-D k-means per group of output channels (Lloyd's algorithm on the sorted
//! values with prefix sums, so an iteration costs O(k log n)), and the
//! output has to be exactly what the MIL ops decompress.

use half::f16;

/// Output channels sharing one palette (fewer when the row count is not a
/// multiple: the largest divisor of it that is at most this).
pub const LUT_GROUP: usize = 16;

/// How weights are stored in an ANE program: fp16, or compressed for a
/// constexpr op to decompress (the model lowering's `--ane-weights` and the
/// graph API's `compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// fp16, uncompressed.
    #[default]
    Fp16,
    /// int8 with one fp16 scale per output channel (symmetric, zero point 0).
    Int8,
    /// Palettized: `bits`-bit indices into a 2^bits-entry fp16 palette per
    /// group of [`LUT_GROUP`] output channels (4, 6 or 8 bits).
    Lut {
        /// Index width.
        bits: u32,
    },
}

impl WeightFormat {
    /// Every format, in the order `--ane-weights` lists them.
    pub const ALL: [WeightFormat; 5] = [
        WeightFormat::Fp16,
        WeightFormat::Int8,
        WeightFormat::Lut { bits: 8 },
        WeightFormat::Lut { bits: 6 },
        WeightFormat::Lut { bits: 4 },
    ];

    /// `fp16`, `int8`, `lut8`, `lut6`, `lut4`.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Fp16 => "fp16",
            WeightFormat::Int8 => "int8",
            WeightFormat::Lut { bits: 8 } => "lut8",
            WeightFormat::Lut { bits: 6 } => "lut6",
            WeightFormat::Lut { .. } => "lut4",
        }
    }

    /// Parses [`WeightFormat::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Weight bits per element stored (palettes and scales not counted).
    pub fn bits(self) -> u32 {
        match self {
            WeightFormat::Fp16 => 16,
            WeightFormat::Int8 => 8,
            WeightFormat::Lut { bits } => bits,
        }
    }
}

/// A row-major `[rows, cols]` matrix as int8 with one scale per row: row r
/// is `scale[r] · q[r]`. The scale (rounded to fp16) is `c · max|w[r]| / 127`
/// with the clip factor `c` (1, 0.95, …, 0.5) that gives the row the least
/// squared error: a lone outlier no longer sets a step that flattens the
/// rest of the row (it saturates at ±127 instead).
pub fn int8_per_row(w: &[f32], rows: usize, cols: usize) -> (Vec<i8>, Vec<f16>) {
    let mut q = Vec::with_capacity(rows * cols);
    let mut scales = Vec::with_capacity(rows);
    for row in w.chunks_exact(cols.max(1)).take(rows) {
        // a non-finite weight (refused at load with --check-tensors) must not
        // make every candidate's error NaN: it is left out of the choice
        let finite = || row.iter().copied().filter(|v| v.is_finite());
        let max = finite().fold(0f32, |m, v| m.max(v.abs()));
        let quantize = |s: f32, v: f32| (v / s).round().clamp(-127.0, 127.0);
        let mut best = (f64::INFINITY, 1.0f32);
        for &c in &INT8_CLIPS {
            // an fp16 scale of a tiny row can round to 0; 1 keeps q = 0 exact
            let s = f16::from_f32(c * max / 127.0).to_f32();
            let s = if s > 0.0 { s } else { 1.0 };
            let err: f64 = finite()
                .map(|v| f64::from(quantize(s, v) * s - v).powi(2))
                .sum();
            if err < best.0 {
                best = (err, s);
            }
        }
        let s = best.1;
        q.extend(row.iter().map(|&v| quantize(s, v) as i8));
        scales.push(f16::from_f32(s));
    }
    (q, scales)
}

/// The weights `format` stores for the row-major `[rows, cols]` matrix
/// `w`, as the decompression gives them back (int8 `q · scale`, a palette
/// entry per weight, fp16 rounding): what a program computes with.
/// `iterations` are the palettes' k-means rounds. `None` where
/// [`palettize`] refuses the shape or width.
pub fn roundtrip(
    format: WeightFormat,
    w: &[f32],
    rows: usize,
    cols: usize,
    iterations: usize,
) -> Option<Vec<f32>> {
    match format {
        WeightFormat::Fp16 => Some(w.iter().map(|&v| f16::from_f32(v).to_f32()).collect()),
        WeightFormat::Int8 => {
            let (q, scales) = int8_per_row(w, rows, cols);
            let mut out = Vec::with_capacity(q.len());
            for (row, s) in q.chunks_exact(cols.max(1)).zip(&scales) {
                out.extend(
                    row.iter()
                        .map(|&v| f16::from_f32(f32::from(v) * s.to_f32()).to_f32()),
                );
            }
            Some(out)
        }
        WeightFormat::Lut { bits } => {
            let p = palettize(w, rows, cols, bits, iterations)?;
            let k = 1usize << bits;
            let per_group = p.group * cols;
            Some(
                p.indices
                    .iter()
                    .enumerate()
                    .map(|(i, &ix)| p.palettes[i / per_group * k + usize::from(ix)].to_f32())
                    .collect(),
            )
        }
    }
}

/// Clip factors tried per int8 row (1 = no clipping).
const INT8_CLIPS: [f32; 8] = [1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5];

/// Palettized `[rows, cols]` weights: indices (one per weight) and the
/// palettes (`2^bits` fp16 entries per group of `group` rows, in order).
#[derive(Debug, Clone, PartialEq)]
pub struct Palettized {
    /// Index of each weight into its group's palette.
    pub indices: Vec<u8>,
    /// `rows / group` palettes of `2^bits` entries.
    pub palettes: Vec<f16>,
    /// Rows per palette.
    pub group: usize,
}

/// The largest divisor of `rows` that is at most [`LUT_GROUP`].
pub fn lut_group(rows: usize) -> usize {
    (1..=LUT_GROUP.min(rows.max(1)))
        .rev()
        .find(|g| rows.is_multiple_of(*g))
        .unwrap_or(1)
}

/// Palettizes a row-major `[rows, cols]` matrix with `bits`-bit indices: a
/// 1-D k-means (Lloyd, `iterations` rounds) per group of [`lut_group`]
/// rows, palettes rounded to fp16, every weight mapped to its nearest fp16
/// palette entry. `None` for an index width other than 4, 6 or 8, or a
/// matrix that is empty or not `rows × cols`.
pub fn palettize(
    w: &[f32],
    rows: usize,
    cols: usize,
    bits: u32,
    iterations: usize,
) -> Option<Palettized> {
    if !matches!(bits, 4 | 6 | 8) || rows == 0 || cols == 0 || w.len() != rows * cols {
        return None;
    }
    let k = 1usize << bits;
    let group = lut_group(rows);
    let mut indices = vec![0u8; rows * cols];
    let mut palettes = Vec::with_capacity(rows / group * k);
    for (g, block) in w.chunks(group * cols).enumerate() {
        let palette = kmeans_1d(block, k, iterations);
        let palette: Vec<f16> = palette.iter().map(|&c| f16::from_f32(c)).collect();
        let values: Vec<f32> = palette.iter().map(|c| c.to_f32()).collect();
        for (i, &v) in block.iter().enumerate() {
            indices[g * group * cols + i] = nearest(&values, v) as u8;
        }
        palettes.extend(palette);
    }
    Some(Palettized {
        indices,
        palettes,
        group,
    })
}

/// The index of the entry of `sorted` (ascending) nearest to `v`.
fn nearest(sorted: &[f32], v: f32) -> usize {
    let i = sorted.partition_point(|&c| c < v);
    match (i.checked_sub(1), sorted.get(i)) {
        (Some(lo), Some(&hi)) if (v - sorted[lo]) <= (hi - v) => lo,
        (Some(lo), None) => lo,
        _ => i.min(sorted.len().saturating_sub(1)),
    }
}

/// `k` ascending centroids of `values` by Lloyd's algorithm.
///
/// Works on the distinct values with their counts, so weights that are
/// already quantized (a GGUF's Q4_K rows hold few distinct levels) never
/// get two centroids on one value; when there are at most `k` distinct
/// values they are the palette, exactly.
fn kmeans_1d(values: &[f32], k: usize, iterations: usize) -> Vec<f32> {
    let mut sorted: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f32::total_cmp);
    let mut distinct: Vec<f32> = Vec::new();
    let mut count: Vec<f64> = Vec::new();
    for v in sorted {
        if distinct.last() == Some(&v) {
            if let Some(c) = count.last_mut() {
                *c += 1.0;
            }
        } else {
            distinct.push(v);
            count.push(1.0);
        }
    }
    let m = distinct.len();
    if m == 0 {
        return vec![0.0; k];
    }
    if m <= k {
        let last = distinct[m - 1];
        distinct.resize(k, last);
        return distinct;
    }
    // prefix sums of counts and of count·value, in f64
    let (mut cum_n, mut cum_s) = (vec![0f64; m + 1], vec![0f64; m + 1]);
    for i in 0..m {
        cum_n[i + 1] = cum_n[i] + count[i];
        cum_s[i + 1] = cum_s[i] + count[i] * f64::from(distinct[i]);
    }
    let total = cum_n[m];
    // Half the starts at count-weighted quantiles (the bulk), half evenly
    // over the range (the tails: Lloyd alone moves centroids into heavy
    // tails far too slowly), each snapped to a distinct value.
    let (lo, hi) = (distinct[0], distinct[m - 1]);
    let mut targets: Vec<usize> = (0..k)
        .map(|j| {
            if j % 2 == 0 {
                let q = (j + 1) as f64 * total / (k + 1) as f64;
                cum_n[1..].partition_point(|&n| n < q)
            } else {
                let x = lo + (hi - lo) * j as f32 / (k - 1) as f32;
                distinct.partition_point(|&v| v < x)
            }
            .min(m - 1)
        })
        .collect();
    targets.sort_unstable();
    let mut c = Vec::with_capacity(k);
    let mut next = 0usize; // first distinct index not yet used by a centroid
    for (j, at) in targets.into_iter().enumerate() {
        // stay distinct, leaving room for the centroids still to place
        let at = at.max(next).min(m - (k - j));
        c.push(distinct[at]);
        next = at + 1;
    }
    for _ in 0..iterations {
        let mut start = 0;
        let mut moved = false;
        for j in 0..k {
            let end = if j + 1 < k {
                let mid = 0.5 * (c[j] + c[j + 1]);
                distinct.partition_point(|&v| v <= mid).max(start)
            } else {
                m
            };
            if end > start {
                let mean = ((cum_s[end] - cum_s[start]) / (cum_n[end] - cum_n[start])) as f32;
                moved |= mean != c[j];
                c[j] = mean;
            }
            start = end;
        }
        c.sort_by(f32::total_cmp);
        if !moved {
            break;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(rows: usize, cols: usize) -> Vec<f32> {
        // heavy-tailed like real projections: a few large entries per row
        (0..rows * cols)
            .map(|i| {
                let u = ((i as u64).wrapping_mul(6_364_136_223_846_793_005) >> 40) as f32
                    / (1u64 << 24) as f32;
                let x = (u - 0.5) * 0.2;
                if i % 97 == 0 {
                    x * 20.0
                } else {
                    x
                }
            })
            .collect()
    }

    fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        let den: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
        (num / den).sqrt()
    }

    #[test]
    fn int8_rows_round_to_half_a_step() {
        let (rows, cols) = (24, 80);
        let w = weights(rows, cols);
        let (q, s) = int8_per_row(&w, rows, cols);
        for r in 0..rows {
            let scale = s[r].to_f32();
            for c in 0..cols {
                let back = f32::from(q[r * cols + c]) * scale;
                assert!(
                    (back - w[r * cols + c]).abs() <= 0.5 * scale * 1.001,
                    "{r},{c}"
                );
            }
            assert!(q[r * cols..(r + 1) * cols].iter().any(|v| v.abs() == 127));
        }
        // an all-zero row stays zero
        let (q, s) = int8_per_row(&[0.0; 8], 2, 4);
        assert!(q.iter().all(|&v| v == 0) && s.iter().all(|v| v.to_f32() == 1.0));
    }

    /// k-means beats a uniform grid of the same size, and more bits help.
    #[test]
    fn palettes_fit_better_than_a_uniform_grid() {
        let (rows, cols) = (32, 128);
        let w = weights(rows, cols);
        let mut last = f64::INFINITY;
        for bits in [4, 6, 8] {
            let p = palettize(&w, rows, cols, bits, 20).unwrap();
            assert_eq!(p.group, 16);
            assert_eq!(p.palettes.len(), 2 << bits);
            let k = 1usize << bits;
            let back: Vec<f32> = p
                .indices
                .iter()
                .enumerate()
                .map(|(i, &j)| p.palettes[(i / (16 * cols)) * k + usize::from(j)].to_f32())
                .collect();
            let err = rel_rms(&w, &back);
            // the same number of levels spread evenly over each group's range
            let uniform: Vec<f32> = w
                .chunks(16 * cols)
                .flat_map(|g| {
                    let (lo, hi) = g
                        .iter()
                        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
                    let step = (hi - lo) / (k - 1) as f32;
                    g.iter()
                        .map(move |&v| lo + ((v - lo) / step).round() * step)
                        .collect::<Vec<_>>()
                })
                .collect();
            let uerr = rel_rms(&w, &uniform);
            println!("lut{bits}: k-means {err:.2e}, uniform {uerr:.2e}");
            assert!(err < uerr, "lut{bits}: {err} vs uniform {uerr}");
            assert!(err < last);
            last = err;
        }
    }

    #[test]
    fn bad_shapes_and_widths_are_refused() {
        assert!(palettize(&[], 0, 0, 4, 1).is_none());
        assert!(palettize(&[1.0; 6], 2, 3, 5, 1).is_none());
        assert!(palettize(&[1.0; 6], 2, 4, 4, 1).is_none());
        // a NaN does not zero its row
        let (q, s) = int8_per_row(&[f32::NAN, 1.0, -0.5, 0.25], 1, 4);
        assert!(
            (f32::from(q[1]) * s[0].to_f32() - 1.0).abs() < 0.01,
            "{q:?} {s:?}"
        );
    }

    #[test]
    fn format_names_round_trip() {
        for f in WeightFormat::ALL {
            assert_eq!(WeightFormat::from_name(f.name()), Some(f));
        }
        assert_eq!(WeightFormat::from_name("none"), None);
    }

    #[test]
    fn groups_divide_the_rows() {
        assert_eq!(lut_group(640), 16);
        assert_eq!(lut_group(100), 10);
        assert_eq!(lut_group(7), 7);
        assert_eq!(lut_group(17), 1);
    }
}
