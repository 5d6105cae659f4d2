//! `WeightSource::release` on a mapped file: the tensor's pages leave the
//! process (the mapping's resident size drops, Linux) and its bytes read
//! back unchanged afterwards; bad ranges and unknown names are ignored.
#![allow(clippy::unwrap_used)]

use anedvd_base::{GgmlType, WeightSource};
use anedvd_gguf::{GgufFile, GgufWriter};

/// Resident KiB of the mapping of `path` in this process (Linux only).
fn mapped_rss_kib(path: &std::path::Path) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let name = path.to_str()?;
    let mut lines = smaps.lines();
    while let Some(l) = lines.next() {
        if l.ends_with(name) {
            for l in lines.by_ref() {
                if let Some(v) = l.strip_prefix("Rss:") {
                    return v.trim().trim_end_matches("kB").trim().parse().ok();
                }
            }
        }
    }
    None
}

#[test]
fn released_pages_leave_and_bytes_stay() {
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut w = GgufWriter::new();
    w.add_tensor("big", GgmlType::I8, &[data.len() as u64], data.clone())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("release.gguf");
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    // Reading every byte makes the whole tensor resident.
    assert_eq!(f.tensor("big").unwrap().data, &data[..]);
    let rss_touched = mapped_rss_kib(&path);
    f.release("big", 0..data.len());
    let rss_released = mapped_rss_kib(&path);
    if let (Some(a), Some(b)) = (rss_touched, rss_released) {
        assert!(a >= 4000, "the whole tensor was resident ({a} KiB)");
        assert!(
            b < 100,
            "released pages left the process ({b} KiB resident)"
        );
    }
    assert_eq!(f.tensor("big").unwrap().data, &data[..]);
    // Out-of-range, reversed and unknown requests do nothing.
    f.release("big", 0..data.len() + 1);
    #[allow(clippy::reversed_empty_ranges)]
    f.release("big", 10..5);
    f.release("nope", 0..1);
    assert_eq!(f.tensor("big").unwrap().data, &data[..]);
}

#[test]
fn will_read_maps_the_pages_in_without_a_read() {
    let data = vec![7u8; 16 << 20];
    let mut w = GgufWriter::new();
    w.add_tensor("big", GgmlType::I8, &[data.len() as u64], data.clone())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("populate.gguf");
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let before = mapped_rss_kib(&path);
    f.will_read("big", 0..data.len());
    let after = mapped_rss_kib(&path);
    if let (Some(a), Some(b)) = (before, after) {
        // MADV_POPULATE_READ needs Linux 5.14; older kernels ignore it.
        // (Parsing the header may already map a large folio of the file.)
        let populated = b >= 15_000 && b >= a + 8000;
        let supported = !std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .is_ok_and(|v| v.starts_with("4.") || v.starts_with("5.") && !v.starts_with("5.1"));
        assert!(populated || !supported, "{a} -> {b} KiB resident");
    }
    assert_eq!(f.tensor("big").unwrap().data, &data[..]);
    f.will_read("big", 0..data.len() + 1);
    f.will_read("nope", 0..1);
}
