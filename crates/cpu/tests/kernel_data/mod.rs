//! Random weights and activations for the kernel tests (shared by
//! `kernels_simd.rs` and `kernels_packed.rs`).
#![allow(dead_code)]

use anedvd_base::GgmlType;
use anedvd_cpu::qkernels::ActFormat;
use anedvd_quant::f32_to_f16;

/// SIMD vs generic on random data, relative to `sum |w_i| |x_i|`: integer
/// dots are exact in both, so only the f32 reduction order differs
/// (per-lane partial sums times the block scale, then a horizontal sum).
pub fn tol_simd(ty: GgmlType) -> f32 {
    match ty {
        // f32 lanes with FMA vs f64 accumulation.
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 2e-6,
        // Integer block sums, f32 reduction order only.
        _ => 4e-6,
    }
}

/// splitmix64.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Byte offsets of the f16 scale fields of one block (the rest are quants).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4NL | IQ4XS => &[0],
        Q6K => &[208],
        Q4_1 | Q5_1 | Q4K | Q5K => &[0, 2],
        Q2K => &[80, 82],
        Q3K => &[108],
        _ => &[],
    }
}

/// `rows` weight rows of `n_cols`: random quant bytes (every bit pattern)
/// with finite f16 scales from `scale()`; float types get random values.
pub fn random_weights(
    ty: GgmlType,
    rows: usize,
    n_cols: usize,
    rng: &mut Rng,
    mut scale: impl FnMut(&mut Rng) -> f32,
) -> Vec<u8> {
    let rb = ty.row_bytes(n_cols as u64).expect("whole blocks") as usize;
    let mut w = vec![0u8; rows * rb];
    match ty {
        GgmlType::F32 => {
            for c in w.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.f().to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&f32_to_f16(rng.f()).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&anedvd_quant::f32_to_bf16(rng.f()).to_le_bytes());
            }
        }
        _ => {
            w.iter_mut().for_each(|b| *b = rng.next() as u8);
            let bb = ty.block_bytes() as usize;
            for blk in w.chunks_exact_mut(bb) {
                for &o in scale_offsets(ty) {
                    blk[o..o + 2].copy_from_slice(&f32_to_f16(scale(rng)).to_le_bytes());
                }
            }
        }
    }
    w
}

/// `sum |w_i| |x_i|` over one row (the scale of rounding errors).
pub fn magnitude(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    let mut wf = vec![0.0; x.len()];
    anedvd_quant::dequantize(ty, row, &mut wf).expect("dequantize");
    wf.iter().zip(x).map(|(w, x)| w.abs() * x.abs()).sum()
}

pub fn cols_for(ty: GgmlType, n_blocks: usize) -> usize {
    n_blocks
        * ActFormat::for_weight(ty)
            .expect("supported")
            .block()
            .max(32)
}
