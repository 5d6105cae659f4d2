//! Scalar float formats: ggml's exact f16/bf16/e8m0 conversions and the
//! F32/F16/BF16/I8/I16/I32/I64/F64 row converters.

/// f16 bits -> f32, as ggml's `ggml_compute_fp16_to_fp32` (exact; subnormals kept).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w);
    let exp_offset: u32 = 0xE0 << 23;
    let exp_scale = f32::from_bits(0x0780_0000); // 2^-112
    let normalized = f32::from_bits((two_w >> 4) + exp_offset) * exp_scale;
    let magic_mask: u32 = 126 << 23;
    let denormalized = f32::from_bits((two_w >> 17) | magic_mask) - 0.5;
    let denormalized_cutoff: u32 = 1 << 27;
    let bits = if two_w < denormalized_cutoff {
        denormalized.to_bits()
    } else {
        normalized.to_bits()
    };
    f32::from_bits(sign | bits)
}

/// f32 -> f16 bits, as ggml's `ggml_compute_fp32_to_fp16`: round to nearest
/// even, overflow to infinity, every NaN becomes the quiet NaN `0x7E00` (sign kept).
#[inline]
pub fn f32_to_f16(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 2^112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 2^-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let bias = (shl1_w & 0xFF00_0000).max(0x7100_0000);
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7C00;
    let mantissa_bits = bits & 0x0000_0FFF;
    let nonsign = exp_bits + mantissa_bits;
    let low = if shl1_w > 0xFF00_0000 {
        0x7E00
    } else {
        nonsign
    };
    ((sign >> 16) | low) as u16
}

/// bf16 bits -> f32 (exact).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 -> bf16 bits, as ggml's `ggml_compute_fp32_to_bf16`: round to nearest
/// even; NaNs are truncated and forced quiet.
#[inline]
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// ggml's `GGML_E8M0_TO_FP32_HALF`: half of 2^(x-127), used by MXFP4.
#[inline]
pub fn e8m0_to_f32_half(x: u8) -> f32 {
    let bits = if x < 2 {
        0x0020_0000_u32 << x
    } else {
        ((x - 1) as u32) << 23
    };
    f32::from_bits(bits)
}

/// F32 bytes -> f32 (lengths already checked).
pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// F16 bytes -> f32.
pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// BF16 bytes -> f32.
pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// I8 bytes -> f32.
pub(crate) fn dequantize_i8(src: &[u8], dst: &mut [f32]) {
    for (&b, y) in src.iter().zip(dst) {
        *y = b as i8 as f32;
    }
}

/// I16 bytes -> f32.
pub(crate) fn dequantize_i16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = i16::from_le_bytes([b[0], b[1]]) as f32;
    }
}

/// I32 bytes -> f32 (rounded to nearest for |v| > 2^24).
pub(crate) fn dequantize_i32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst) {
        *y = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32;
    }
}

/// I64 bytes -> f32 (rounded to nearest).
pub(crate) fn dequantize_i64(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(8).zip(dst) {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        *y = i64::from_le_bytes(a) as f32;
    }
}

/// F64 bytes -> f32 (rounded to nearest).
pub(crate) fn dequantize_f64(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(8).zip(dst) {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        *y = f64::from_le_bytes(a) as f32;
    }
}

/// f32 -> F32 bytes.
pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// f32 -> F16 bytes.
pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (&x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_f16(x).to_le_bytes());
    }
}

/// f32 -> BF16 bytes.
pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (&x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(x).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 value widens exactly as the `half` crate does (an independent
    /// implementation), and narrows back to itself.
    #[test]
    fn f16_all_values_round_trip() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            let r = half::f16::from_bits(h).to_f32();
            if r.is_nan() {
                assert!(f.is_nan(), "{h:#06x}");
                assert_eq!(f32_to_f16(f) & 0x7fff, 0x7e00);
            } else {
                assert_eq!(f.to_bits(), r.to_bits(), "{h:#06x}");
                assert_eq!(f32_to_f16(f), h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn f32_to_f16_rounds_like_half() {
        let mut x: u32 = 0x1234_5678;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let f = f32::from_bits(x);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(f), half::f16::from_f32(f).to_bits(), "{x:#010x}");
        }
    }

    #[test]
    fn bf16_rounding_and_nan() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }

    #[test]
    fn e8m0_half() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(0).to_bits(), 0x0020_0000);
        assert_eq!(e8m0_to_f32_half(1).to_bits(), 0x0040_0000);
    }
}
