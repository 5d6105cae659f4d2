//! Which weight matrices are repacked at load ([`Packing`]).
//!
//! The packed layouts (`kernels/packed.rs`, `packed_k.rs`) run every
//! product of their types one `vpdpbusd` per 16 rows, which in cache is
//! about twice the file layout's speed. From DRAM the picture splits by
//! type (one thread, single-token matvec, 2-vCPU AMD EPYC Zen 5, 32 MiB L3,
//! `BENCH_FILTER=K BENCH_TOKENS=1 cargo bench -p anedvd-cpu --bench
//! kernels_matvec`, GB/s of weight bytes):
//!
//! | case | file layout | packed |
//! |---|---|---|
//! | Q4_K 640x2048 (in L2) | 37.2 | 109.7 |
//! | Q4_K 81920x2048 (94 MB, DRAM) | 32.5 | 36.7 prefetching 2 KB ahead (33.8 at 1 KB) |
//! | Q6_K 640x2048 (in L2) | 54.2 | 97.3 |
//! | Q6_K 16384x2048 (28 MB, L3) | 40.5 | 29.7 |
//! | Q6_K 151936x2048 (255 MB, DRAM) | 31.8-35.1 | 15-19 |
//!
//! Packed Q6_K streams from memory at about half the file layout's rate,
//! whatever the prefetch distance (0 to 52 KB ahead, with or without its
//! headers' stream: all 15-19 GB/s), so a Llama-3.2-1B-shaped Q4_K_M file,
//! whose tied 128256-row output matrix alone is 215 MB of Q6_K, decoded
//! 44.4-45.2 tok/s with Q6_K packed and 51.7-52.1 without (2 threads).
//! On AVX-512 VNNI Q6_K is therefore packed only when the whole model fits
//! in the last-level cache (as Gemma 3 270M does on a host with a 480 MiB
//! L3), where the packed kernel's in-cache speed is what decode sees.
//!
//! The AVX2 kernels (`x86_64/avx2_packed_k.rs`) have no such split: their
//! file-layout row kernels are bound by the one integer multiply pipe of a
//! Zen 2 core, and packed halves the multiplies (2-vCPU AMD EPYC Zen 2,
//! 16 MiB L3, same bench, GB/s):
//!
//! | case | file layout | packed |
//! |---|---|---|
//! | Q4_K 128x2048 (in L2) | 15.4 | 31.7 |
//! | Q4_K 81920x2048 (DRAM), 2 threads | 16.5 | 22.7 (plain read 20.7) |
//! | Q6_K 151936x2048 (DRAM), 1 thread | 9.9 | 13.1 |
//! | Q6_K 151936x2048 (DRAM), 2 threads | 16.6 | 24.3 (plain read 23.7) |
//!
//! so there every Q4_K and Q6_K matrix is packed
//! ([`crate::qkernels::Kernels::packed_streams`]).

use anedvd_base::GgmlType;

/// What [`crate::compiled::Model::new`] packs at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// Every matrix keeps the file's layout (`--no-pack`, or the ANE
    /// backends' host matrices).
    None,
    /// Every type with a packed layout on the kernels in use.
    All,
    /// Every such type but Q6_K (the model is larger than the last-level
    /// cache, and these kernels' packed Q6_K streams slower than the file
    /// layout).
    AllButQ6K,
}

impl Packing {
    /// The policy for a model of `model_bytes` when packing is `enabled`,
    /// on a CPU whose last-level cache holds `llc_bytes` (`None`: unknown,
    /// taken as too small), with kernels whose packed Q6_K streams from
    /// memory as fast as the file layout or not (`q6_k_streams`,
    /// [`crate::qkernels::Kernels::packed_streams`]).
    pub fn for_model(
        enabled: bool,
        model_bytes: u64,
        llc_bytes: Option<u64>,
        q6_k_streams: bool,
    ) -> Self {
        match (enabled, llc_bytes) {
            (false, _) => Packing::None,
            (true, _) if q6_k_streams => Packing::All,
            (true, Some(llc)) if model_bytes <= llc => Packing::All,
            (true, _) => Packing::AllButQ6K,
        }
    }

    /// True if matrices of type `ty` are packed (where the kernels have a
    /// packed layout for it at all: [`crate::qkernels::Kernels::packs`]).
    pub fn includes(self, ty: GgmlType) -> bool {
        match self {
            Packing::None => false,
            Packing::All => true,
            Packing::AllButQ6K => ty != GgmlType::Q6K,
        }
    }
}

/// Bytes of this machine's last-level cache (the largest `size` among the
/// caches of the highest `level` that Linux lists for CPU 0), if it can be
/// read.
pub fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    dir.filter_map(|e| {
        let path = e.ok()?.path();
        let level: u32 = read(path.join("level"))?.trim().parse().ok()?;
        Some((level, parse_cache_size(&read(path.join("size"))?)?))
    })
    .max()
    .map(|(_, size)| size)
}

/// A sysfs cache size (`32768K`, `2M`, `512`) in bytes.
fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("12Q"), None);
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("99999999999999999999G"), None);
    }

    #[test]
    fn q6_k_is_packed_only_when_the_model_fits_the_last_level_cache_or_it_streams() {
        let mib = 1u64 << 20;
        let gemma = 242 * mib;
        assert_eq!(
            Packing::for_model(true, gemma, Some(480 * mib), false),
            Packing::All
        );
        assert_eq!(
            Packing::for_model(true, gemma, Some(32 * mib), false),
            Packing::AllButQ6K
        );
        assert_eq!(
            Packing::for_model(true, gemma, None, false),
            Packing::AllButQ6K
        );
        assert_eq!(
            Packing::for_model(true, gemma, Some(32 * mib), true),
            Packing::All
        );
        assert_eq!(Packing::for_model(true, gemma, None, true), Packing::All);
        assert_eq!(
            Packing::for_model(false, gemma, Some(480 * mib), true),
            Packing::None
        );
        assert!(Packing::AllButQ6K.includes(GgmlType::Q4K));
        assert!(!Packing::AllButQ6K.includes(GgmlType::Q6K));
        assert!(Packing::All.includes(GgmlType::Q6K));
        assert!(!Packing::None.includes(GgmlType::Q8_0));
    }
}
