//! Property tests: blob writer/reader round trips in both layouts; readers and the parser never panic on arbitrary input.

use anedvd_mil::blob::{BlobFile, BlobLayout, BlobWriter};
use half::f16;
use proptest::prelude::*;

proptest! {
    #[test]
    fn blob_round_trip(chunks in prop::collection::vec(prop::collection::vec(any::<u16>(), 0..80), 1..6), compat in any::<bool>()) {
        let layout = if compat { BlobLayout::EspressoCompat } else { BlobLayout::Aligned };
        let mut w = BlobWriter::new(layout);
        let offs: Vec<u64> = chunks.iter().map(|c| {
            let v: Vec<f16> = c.iter().map(|&b| f16::from_bits(b)).collect();
            w.add_f16(&v)
        }).collect();
        let bytes = w.finish();
        let f = BlobFile::parse(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(f.header_count(), if compat { 1 } else { chunks.len() as u32 });
        for (c, &off) in chunks.iter().zip(&offs) {
            if !compat {
                prop_assert_eq!(off % 64, 0);
            }
            let got = f.blob_at(off).and_then(|b| b.to_f16()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got.iter().map(|h| h.to_bits()).collect::<Vec<_>>(), c.clone());
        }
        let found: Vec<u64> = f.blobs().map_err(|e| TestCaseError::fail(e.to_string()))?.iter().map(|b| b.meta_offset).collect();
        prop_assert_eq!(found, offs);
    }

    #[test]
    fn blob_reader_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400), off in 0u64..512) {
        let mut b = bytes;
        if b.len() >= 8 {
            b[4..8].copy_from_slice(&2u32.to_le_bytes());
        }
        if b.len() >= 68 && off % 2 == 0 {
            b[64..68].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        }
        if let Ok(f) = BlobFile::parse(&b) {
            let _ = f.blobs();
            let _ = f.blob_at(off);
        }
    }

    #[test]
    fn parser_never_panics(src in "[ -~\n]{0,200}") {
        let _ = anedvd_mil::parse(&src);
    }

    #[test]
    fn parser_never_panics_on_mutated_program(cut in 0usize..1500, junk in "[ -~]{0,8}") {
        let base = include_str!("fixtures/generated/swiglu_ffn.mil");
        let cut = cut.min(base.len());
        let src = format!("{}{}{}", &base[..cut], junk, &base[cut..]);
        if let Ok(p) = anedvd_mil::parse(&src) {
            let text = anedvd_mil::print(&p);
            prop_assert_eq!(anedvd_mil::parse(&text).ok(), Some(p));
        }
    }
}
