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
