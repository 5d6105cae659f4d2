//! Arbitrary bytes to the MIL weight blob reader (`BlobFile::parse`, then
//! `blobs()` and `blob_at`).
//!
//! Asserts: no panic; every blob handed out lies inside the file, after its
//! 64-byte metadata block, with exactly the size its metadata gives;
//! `blob_at(meta_offset)` returns the same view; an fp16 view decodes to
//! `len / 2` values exactly when it is `Float16` of even length; and the
//! blobs re-written by `BlobWriter` (both layouts) read back as the same
//! dtype/payload sequence; packed (uint4/uint6) views honour their padding
//! bits and unpack to values that fit their width.
#![no_main]

use anedvd_mil::blob::{BlobDType, BlobFile, BlobLayout, BlobWriter, BLOCK, SENTINEL};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = BlobFile::parse(data) else {
        return;
    };
    // Random offsets too, not just the enumerated ones.
    for chunk in data.chunks_exact(8).take(4) {
        let off = u64::from_le_bytes(chunk.try_into().unwrap()) % (data.len() as u64 + 128);
        if let Ok(b) = file.blob_at(off) {
            check_view(data, &b);
        }
    }
    let Ok(blobs) = file.blobs() else {
        return;
    };
    let mut prev_end = BLOCK;
    for b in &blobs {
        check_view(data, b);
        assert_eq!(file.blob_at(b.meta_offset).unwrap(), *b);
        // Enumeration walks forward: each metadata block starts at or after
        // the end of the previous payload.
        assert!(b.meta_offset >= prev_end, "blob at {} overlaps the previous one", b.meta_offset);
        prev_end = b.data_offset + b.data.len() as u64;
    }
    for layout in [BlobLayout::Aligned, BlobLayout::EspressoCompat] {
        let mut w = BlobWriter::new(layout);
        let offsets: Vec<u64> = blobs.iter().map(|b| w.add_raw(b.dtype, b.data)).collect();
        let bytes = w.finish();
        let again = BlobFile::parse(&bytes).expect("writer output parses");
        for (o, b) in offsets.iter().zip(&blobs) {
            let v = again.blob_at(*o).expect("written blob reads back");
            assert_eq!((v.dtype, v.data), (b.dtype, b.data));
        }
        if layout == BlobLayout::Aligned {
            assert_eq!(again.header_count() as usize, blobs.len());
            // Enumeration of our own aligned output finds exactly what we wrote
            // (unless a payload itself looks like a metadata block).
            let spoof = blobs.iter().any(|b| {
                b.data.windows(4).any(|w| w == SENTINEL.to_le_bytes())
            });
            if !spoof {
                let listed = again.blobs().expect("written file enumerates");
                let got: Vec<_> = listed.iter().map(|v| (v.dtype, v.data)).collect();
                let want: Vec<_> = blobs.iter().map(|b| (b.dtype, b.data)).collect();
                assert_eq!(got, want);
            }
        }
    }
});

fn check_view(data: &[u8], b: &anedvd_mil::blob::BlobView<'_>) {
    let start = b.data_offset as usize;
    let end = start + b.data.len();
    assert!(b.meta_offset >= BLOCK);
    assert!(b.data_offset >= b.meta_offset + BLOCK);
    assert!(end <= data.len());
    assert_eq!(&data[start..end], b.data);
    let meta = b.meta_offset as usize;
    let size = u64::from_le_bytes(data[meta + 8..meta + 16].try_into().unwrap());
    assert_eq!(size, b.data.len() as u64, "payload length differs from the metadata size");
    let code = u32::from_le_bytes(data[meta + 4..meta + 8].try_into().unwrap());
    assert_eq!(b.dtype.code(), code);
    assert_eq!(BlobDType::from_code(code), Some(b.dtype));
    match b.to_f16() {
        Ok(v) => {
            assert_eq!(b.dtype, BlobDType::Float16);
            assert_eq!(v.len() * 2, b.data.len());
        }
        Err(_) => assert!(b.dtype != BlobDType::Float16 || b.data.len() % 2 == 1),
    }
    // Packed payloads: the element count honours the padding bits, and the
    // unpacked values fit their width.
    let padding = u64::from_le_bytes(data[meta + 24..meta + 32].try_into().unwrap());
    assert_eq!(b.padding_bits, padding);
    if let Some(n) = b.elements() {
        assert!(b.padding_bits < 8);
        let bits = u64::from(b.dtype.bits().unwrap());
        assert_eq!(n * bits + b.padding_bits, b.data.len() as u64 * 8);
    }
    if let Ok(v) = b.to_unsigned() {
        let bits = b.dtype.bits().unwrap();
        assert!(v.iter().all(|&x| u32::from(x) >> bits == 0 || bits == 8));
        assert_eq!(Some(v.len() as u64), b.elements());
    }
    if let Ok(v) = b.to_i8() {
        assert_eq!(v.len(), b.data.len());
    }
}
