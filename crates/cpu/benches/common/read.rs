//! The plain read both benches measure against (included with `#[path]`,
//! as each bench is its own crate).

/// Wrapping sum of the bytes as u64 words, 8 independent lanes (so the
/// adds never limit the read).
pub fn read_all(w: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    for c in w.chunks_exact(64) {
        for (a, b) in acc.iter_mut().zip(c.chunks_exact(8)) {
            *a = a.wrapping_add(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        }
    }
    acc.iter().fold(0, |s, v| s ^ v)
}
