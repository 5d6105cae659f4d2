//! Q8_K as a typed block: the CPU backend's activation format and its
//! reference quantizer (`quantize_row_q8_K_ref`).

use crate::kquants::QK_K;
use crate::util::nearest_int;

/// One Q8_K block (the CPU backend's activation format): f32 scale, 256
/// signed 8-bit quants and the sums of each 16 quants (292 bytes on disk).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8K {
    /// Scale; element `j` is `d * qs[j]`.
    pub d: f32,
    /// The quants.
    pub qs: [i8; QK_K],
    /// `bsums[j] = sum(qs[16*j .. 16*j+16])`.
    pub bsums: [i16; QK_K / 16],
}

impl BlockQ8K {
    /// Bytes of one block in ggml layout.
    pub const BYTES: usize = 292;

    /// An all-zero block.
    pub const ZERO: Self = Self {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
    };

    /// Parses a block from its ggml byte layout.
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Self {
        let mut out = Self::ZERO;
        out.d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (q, &v) in out.qs.iter_mut().zip(&b[4..260]) {
            *q = v as i8;
        }
        for (s, c) in out.bsums.iter_mut().zip(b[260..].chunks_exact(2)) {
            *s = i16::from_le_bytes([c[0], c[1]]);
        }
        out
    }

    /// Serializes the block in ggml byte layout.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..4].copy_from_slice(&self.d.to_le_bytes());
        for (o, &q) in b[4..260].iter_mut().zip(&self.qs) {
            *o = q as u8;
        }
        for (c, s) in b[260..].chunks_exact_mut(2).zip(&self.bsums) {
            c.copy_from_slice(&s.to_le_bytes());
        }
        b
    }

    /// `quantize_row_q8_K_ref` for one block of 256 values.
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        let (amax, max) = crate::legacy::signed_absmax(x);
        let mut out = Self::ZERO;
        if amax == 0.0 {
            return out;
        }
        let iscale = -127.0 / max;
        for (q, &v) in out.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        out.finish(iscale);
        out
    }

    /// Completes a block whose quants `qs` were rounded with `iscale`
    /// (`-127 / max`): the sums of each 16 quants and `d = 1 / iscale`, as
    /// [`Self::quantize`] and the SIMD quantizers that reproduce it end.
    /// Inlined so that the sums compile into the callers' AVX2/AVX-512
    /// code: called across the crate boundary, the 1B-shaped file decoded
    /// ~3% slower (`anedvd bench -p 0 -n 64`, 8 of 8 alternating rounds).
    #[inline]
    pub fn finish(&mut self, iscale: f32) {
        for (s, c) in self.bsums.iter_mut().zip(self.qs.chunks_exact(16)) {
            *s = c.iter().map(|&q| q as i32).sum::<i32>() as i16;
        }
        self.d = 1.0 / iscale;
    }
}

/// `quantize_row_q8_K_ref` into bytes.
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(BlockQ8K::BYTES))
    {
        let mut xa = [0.0f32; QK_K];
        xa.copy_from_slice(x);
        b.copy_from_slice(&BlockQ8K::quantize(&xa).to_bytes());
    }
}
