//! Read-only memory maps: the one `unsafe` call of the format layer, shared
//! with the safetensors reader in `anedvd-weights`.

/// Maps `file` read-only.
///
/// The map stays valid while the returned value lives. If another process
/// truncates or rewrites the file meanwhile, reads may see the new bytes or
/// fault (SIGBUS); that is inherent to mmap-based loading.
#[allow(unsafe_code)]
pub fn map_readonly(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only and private to this process, so nothing in
    // this process can create a mutable alias of it. Concurrent modification
    // of the file by another process is outside what any mmap-based loader can
    // guard against (documented above); every offset into the map is
    // validated against its length before use.
    unsafe { memmap2::Mmap::map(file) }
}

/// Drops the pages wholly inside `range` (byte offsets into `map`) from this
/// process (`MADV_DONTNEED`); later reads fault them back in from the file.
/// Pages only partly inside `range` stay. Unix only; elsewhere, and on any
/// error, nothing happens (it is only a memory hint).
#[allow(unsafe_code)]
pub fn release(map: &memmap2::Mmap, range: std::ops::Range<usize>) {
    #[cfg(unix)]
    {
        const PAGE: usize = 4096;
        let base = map.as_ptr() as usize;
        let end = range.end.min(map.len());
        // Page-aligned addresses inside the range (the map itself starts on
        // a page boundary; larger pages only make the kernel round further).
        let first = (base + range.start).div_ceil(PAGE) * PAGE - base;
        let last = (base + end) / PAGE * PAGE - base;
        if first < last {
            // SAFETY: the map is read-only and private (`map_readonly`), so
            // dropping its pages loses nothing: the next read of any byte in
            // the range faults it in again from the file, the same bytes the
            // map showed before. No reference into the map becomes dangling;
            // only residency changes.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
    }
    #[cfg(not(unix))]
    let _ = (map, range);
}

/// Maps the pages of `range` (byte offsets into `map`) into this process in
/// one call (`MADV_POPULATE_READ`, Linux 5.14+) rather than a page fault at
/// a time. Elsewhere, and on any error, nothing happens (only a hint).
pub fn populate(map: &memmap2::Mmap, range: std::ops::Range<usize>) {
    #[cfg(target_os = "linux")]
    {
        // `advise_range` widens the range to whole pages itself.
        let end = range.end.min(map.len());
        if range.start < end {
            let _ = map.advise_range(
                memmap2::Advice::PopulateRead,
                range.start,
                end - range.start,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (map, range);
}
