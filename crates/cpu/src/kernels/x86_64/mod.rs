//! x86-64 kernels: AVX2 (+FMA, F16C) and AVX-512 (F/BW/VL, +VNNI) tables,
//! handed out only after run-time CPU feature detection.
//!
//! The row-loop functions in the tables are safe `fn`s that enter
//! `#[target_feature]` code; that is sound because the tables are the only
//! way to reach them and are built only when `is_x86_feature_detected!`
//! confirms every feature the code is compiled for.
#![allow(unsafe_code)]

mod act;
mod avx2;
mod avx2_attn;
mod avx2_packed;
mod avx2_packed_k;
mod avx2_panel;
mod avx2_panel_k;
mod avx2_quant;
mod avx2_x4;
mod avx512;
mod avx512_attn;
mod avx512_packed;
mod avx512_packed_k;
mod avx512_panel;
mod avx512_panel_k;
mod avx512_quant;

use super::{Q8Block, Table};
use anedvd_quant::BlockQ8K;

/// True if AVX2, FMA and F16C are present.
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// Prefetches the first `bytes` of `n` rows from row `r` of `w` (rows
/// `stride` bytes apart): at depth the hardware prefetcher alone left the
/// f16 row kernels waiting on their loads. Prefetching never faults, so
/// addresses past the end are harmless; SSE's `prefetcht0` is in every
/// x86-64 CPU (callers are AVX2 or AVX-512 kernels, which imply it).
#[target_feature(enable = "sse")]
#[inline]
fn prefetch_rows(w: &[u8], stride: usize, r: usize, n: usize, bytes: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for k in 0..n {
        let row = w.as_ptr().wrapping_add((r + k) * stride);
        for l in (0..bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(l).cast());
        }
    }
}

/// Whether this CPU is a Zen 4 (AMD family 0x19, of which only Zen 4 has
/// AVX-512), which gets the VNNI table tuned for it (`avx512::ZEN4_VNNI`).
/// Read once from `cpuid`.
fn is_zen4() -> bool {
    static ZEN4: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ZEN4.get_or_init(|| {
        use std::arch::x86_64::__cpuid;
        let vendor = __cpuid(0);
        // "AuthenticAMD" in EBX, EDX, ECX.
        let amd = [vendor.ebx, vendor.edx, vendor.ecx] == [0x6874_7541, 0x6974_6e65, 0x444d_4163];
        let eax = __cpuid(1).eax;
        let base = (eax >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((eax >> 20) & 0xff)
        } else {
            base
        };
        amd && family == 0x19
    })
}

/// The AVX2 table, if the CPU has AVX2, FMA and F16C.
pub(super) fn avx2_table() -> Option<Table> {
    has_avx2().then_some(avx2::TABLE)
}

/// The AVX-512 VNNI tunings, by name: the plain table and Zen 4's (the
/// same instructions, other choices of kernel and prefetch distance).
const VNNI_TUNINGS: [(&str, Table); 2] = [
    ("avx512vnni", avx512::vnni::TABLE),
    ("avx512vnni-zen4", avx512::ZEN4_VNNI),
];

/// The AVX-512 table and its name, if the CPU has AVX2, FMA, F16C and
/// AVX-512 F/BW/VL (and VNNI when `vnni`; the Zen 4 tuning on Zen 4).
pub(super) fn avx512_table(vnni: bool) -> Option<(&'static str, Table)> {
    let base = has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl");
    match (base, vnni) {
        (false, _) => None,
        (true, false) => Some(("avx512", avx512::bw::TABLE)),
        (true, true) => {
            is_x86_feature_detected!("avx512vnni").then(|| VNNI_TUNINGS[usize::from(is_zen4())])
        }
    }
}

/// The AVX-512 VNNI tuning this CPU does not get, if it has VNNI: tests and
/// benchmarks run it too, so each tuning is checked on every VNNI host.
pub(super) fn avx512_vnni_other_tuning() -> Option<(&'static str, Table)> {
    avx512_table(true).map(|_| VNNI_TUNINGS[usize::from(!is_zen4())])
}

/// The widest activation quantizers (bit for bit the scalar ones) this CPU
/// runs: AVX-512 F/BW/VL, else AVX2.
#[allow(clippy::type_complexity)]
pub(super) fn quantizers() -> Option<(fn(&[f32], &mut [Q8Block]), fn(&[f32], &mut [BlockQ8K]))> {
    let avx512 = has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl");
    if avx512 {
        return Some((avx512_quant::quantize_q8, avx512_quant::quantize_q8k));
    }
    has_avx2().then_some((avx2_quant::quantize_q8, avx2_quant::quantize_q8k))
}

/// The widest gated activation (bit for bit the scalar one) this CPU
/// runs: AVX-512 F, else AVX2.
pub(super) fn gated_fn() -> Option<super::GatedFn> {
    if is_x86_feature_detected!("avx512f") {
        return Some(act::avx512::gated as super::GatedFn);
    }
    has_avx2().then_some(act::avx2::gated as super::GatedFn)
}

/// The F16C conversion of f16 bytes to f32, if the CPU has AVX2, FMA and
/// F16C.
pub(super) fn f16_to_f32_fn() -> Option<super::F16ToF32Fn> {
    has_avx2().then_some(avx2::f16_to_f32 as super::F16ToF32Fn)
}

/// The widest online-softmax row step this CPU runs: AVX-512 F, else
/// AVX2.
pub(super) fn exp_shifted_add_fn() -> Option<super::ExpShiftedAddFn> {
    if is_x86_feature_detected!("avx512f") {
        return Some(act::avx512::exp_shifted_add as super::ExpShiftedAddFn);
    }
    has_avx2().then_some(act::avx2::exp_shifted_add as super::ExpShiftedAddFn)
}

/// The widest attention score exponentiation this CPU runs: AVX-512 F,
/// else AVX2.
pub(super) fn exp_scores_fn() -> Option<super::ExpScoresFn> {
    if is_x86_feature_detected!("avx512f") {
        return Some(act::avx512::exp_scores as super::ExpScoresFn);
    }
    has_avx2().then_some(act::avx2::exp_scores as super::ExpScoresFn)
}
