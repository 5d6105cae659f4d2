//! Blob writer byte-identity with Espresso's and the generated fixtures; reader round trips and hostile inputs.

use std::path::Path;

use anedvd_mil::blob::{BlobDType, BlobFile, BlobLayout, BlobWriter};
use anedvd_mil::Error;
use half::f16;

fn fixture(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn seq(n: usize, add: f32) -> Vec<f32> {
    (0..n).map(|i| i as f32 + add).collect()
}

/// Inputs stated in fixtures/SOURCES.md: W1[i]=i+0.5, W3[i]=i+400.75, 24 fp16 each.
#[test]
fn espresso_ffn_blob_byte_identical() {
    let mut w = BlobWriter::new(BlobLayout::EspressoCompat);
    assert_eq!(w.add_f32_as_f16(&seq(24, 0.5)), 64);
    assert_eq!(w.add_f32_as_f16(&seq(24, 400.75)), 176);
    assert_eq!(w.finish(), fixture("espresso/ffn_blob_ref.bin"));
}

/// Wq=i+0.125, Wk=i+100.25, Wv=i-50.5, 16 fp16 each (SOURCES.md).
#[test]
fn espresso_qkv_blob_byte_identical() {
    let mut w = BlobWriter::new(BlobLayout::EspressoCompat);
    assert_eq!(w.add_f32_as_f16(&seq(16, 0.125)), 64);
    assert_eq!(w.add_f32_as_f16(&seq(16, 100.25)), 160);
    assert_eq!(w.add_f32_as_f16(&seq(16, -50.5)), 256);
    assert_eq!(w.finish(), fixture("espresso/qkv_blob_ref.bin"));
}

#[test]
fn aligned_ffn_blob_byte_identical() {
    let mut w = BlobWriter::new(BlobLayout::Aligned);
    assert_eq!(w.add_f32_as_f16(&seq(24, 0.5)), 64);
    assert_eq!(w.add_f32_as_f16(&seq(24, 400.75)), 192);
    assert_eq!(w.finish(), fixture("generated/ffn_blob_aligned.bin"));
}

fn matrix(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row.as_array().into_iter().flatten())
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect()
}

#[test]
fn aligned_swiglu_blob_byte_identical() {
    let j: serde_json::Value =
        serde_json::from_slice(&fixture("generated/swiglu_ffn.expected.json")).unwrap_or_default();
    let mut w = BlobWriter::new(BlobLayout::Aligned);
    let offs = [
        w.add_f32_as_f16(&matrix(&j["W1"])),
        w.add_f32_as_f16(&matrix(&j["W3"])),
        w.add_f32_as_f16(&matrix(&j["W2"])),
    ];
    assert_eq!(offs, [64, 192, 320]);
    assert_eq!(w.finish(), fixture("generated/swiglu_ffn.weights.bin"));
}

#[test]
fn reader_reads_both_layouts() {
    for (file, offsets, n) in [
        ("espresso/ffn_blob_ref.bin", vec![64u64, 176], 24usize),
        ("espresso/qkv_blob_ref.bin", vec![64, 160, 256], 16),
        ("generated/ffn_blob_aligned.bin", vec![64, 192], 24),
        ("generated/swiglu_ffn.weights.bin", vec![64, 192, 320], 24),
    ] {
        let bytes = fixture(file);
        let f = BlobFile::parse(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        let blobs = f.blobs().unwrap_or_else(|e| panic!("{file}: {e}"));
        let got: Vec<u64> = blobs.iter().map(|b| b.meta_offset).collect();
        assert_eq!(got, offsets, "{file}");
        for off in offsets {
            let b = f
                .blob_at(off)
                .unwrap_or_else(|e| panic!("{file}@{off}: {e}"));
            assert_eq!(b.dtype, BlobDType::Float16);
            assert_eq!(b.to_f16().map(|v| v.len()), Ok(n));
        }
    }
    let bytes = fixture("espresso/ffn_blob_ref.bin");
    let f = BlobFile::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.header_count(), 1);
    let w3 = f.blob_at(176).and_then(|b| b.to_f16()).unwrap_or_default();
    assert_eq!(w3[0], f16::from_f32(400.75));
}

fn blob_err(r: Result<impl std::fmt::Debug, Error>) -> u64 {
    match r {
        Err(Error::Blob { offset, .. }) => offset,
        other => panic!("expected a blob error, got {other:?}"),
    }
}

#[test]
fn hostile_inputs_give_typed_errors() {
    let good = fixture("generated/ffn_blob_aligned.bin");
    // too short for a header
    assert_eq!(blob_err(BlobFile::parse(&good[..63])), 0);
    // wrong version
    let mut b = good.clone();
    b[4] = 1;
    assert_eq!(blob_err(BlobFile::parse(&b)), 4);
    let f = BlobFile::parse(&good).unwrap_or_else(|e| panic!("{e}"));
    // offset at the payload instead of the metadata block (the ORI #8 mistake)
    assert_eq!(blob_err(f.blob_at(128)), 128);
    // inside the header, past the end, overflowing
    assert_eq!(blob_err(f.blob_at(0)), 0);
    assert_eq!(blob_err(f.blob_at(10_000)), 10_000);
    assert_eq!(blob_err(f.blob_at(u64::MAX - 3)), u64::MAX - 3);
    // size field pointing past the end
    let mut b = good.clone();
    b[64 + 8..64 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let f = BlobFile::parse(&b).unwrap_or_else(|e| panic!("{e}"));
    blob_err(f.blob_at(64));
    // data offset overlapping the metadata block
    let mut b = good.clone();
    b[64 + 16..64 + 24].copy_from_slice(&70u64.to_le_bytes());
    let f = BlobFile::parse(&b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(blob_err(f.blob_at(64)), 80);
    // unknown dtype code
    let mut b = good.clone();
    b[64 + 4] = 99;
    let f = BlobFile::parse(&b).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(blob_err(f.blob_at(64)), 68);
    // garbage between blobs stops enumeration with an error
    let mut b = good.clone();
    b[180] = 7;
    let f = BlobFile::parse(&b).unwrap_or_else(|e| panic!("{e}"));
    blob_err(f.blobs());
    // truncated second payload
    let f = BlobFile::parse(&good[..good.len() - 1]).unwrap_or_else(|e| panic!("{e}"));
    blob_err(f.blobs());
    // every truncation and every single-byte corruption is handled without panicking
    for cut in 0..good.len() {
        if let Ok(f) = BlobFile::parse(&good[..cut]) {
            let _ = f.blobs();
        }
    }
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0xff;
        if let Ok(f) = BlobFile::parse(&b) {
            let _ = f.blobs();
            let _ = f.blob_at(64);
        }
    }
}

/// int8, uint8 and packed uint4/uint6 payloads, byte for byte as coremltools'
/// own blob writer wrote them (scripts/fixtures/gen_packed_blob.py), and read back.
#[test]
fn packed_payloads_match_coremltools() {
    use anedvd_mil::blob::{BlobDType, BlobFile, BlobLayout, BlobWriter};
    let want = fixture("coremltools-written/packed.bin");
    let spec: serde_json::Value =
        serde_json::from_slice(&fixture("coremltools-written/packed.json")).unwrap();
    let mut w = BlobWriter::new(BlobLayout::Aligned);
    let blobs = spec["blobs"].as_array().unwrap();
    for b in blobs {
        let vals = b["values"].as_array().unwrap();
        let ints = || vals.iter().map(|v| v.as_i64().unwrap());
        let off = match b["dtype"].as_str().unwrap() {
            "int8" => w.add_i8(&ints().map(|v| v as i8).collect::<Vec<_>>()),
            "fp16" => w.add_f32_as_f16(
                &vals
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect::<Vec<_>>(),
            ),
            t => {
                let bits = t.trim_start_matches("uint").parse::<u32>().unwrap();
                w.add_unsigned(bits, &ints().map(|v| v as u8).collect::<Vec<_>>())
                    .unwrap()
            }
        };
        assert_eq!(off, b["offset"].as_u64().unwrap(), "{b}");
    }
    let ours = w.finish();
    assert_eq!(ours, want, "our file differs from coremltools'");
    let file = BlobFile::parse(&want).unwrap();
    for b in blobs {
        let view = file.blob_at(b["offset"].as_u64().unwrap()).unwrap();
        let vals: Vec<i64> = b["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_i64())
            .collect();
        match view.dtype {
            BlobDType::Int8 => {
                let got: Vec<i64> = view.to_i8().unwrap().into_iter().map(i64::from).collect();
                assert_eq!(got, vals);
            }
            BlobDType::Float16 => assert_eq!(view.elements(), Some(3)),
            _ => {
                let got: Vec<i64> = view
                    .to_unsigned()
                    .unwrap()
                    .into_iter()
                    .map(i64::from)
                    .collect();
                assert_eq!(got, vals, "{:?}", view.dtype);
            }
        }
    }
    // values that do not fit, and widths the format lacks, are refused
    assert!(BlobWriter::new(BlobLayout::Aligned)
        .add_unsigned(4, &[16])
        .is_none());
    assert!(BlobWriter::new(BlobLayout::Aligned)
        .add_unsigned(5, &[1])
        .is_none());
}

/// A hostile padding-bits field cannot make the reader index past the payload.
#[test]
fn packed_payload_with_bad_padding_is_an_error() {
    use anedvd_mil::blob::{BlobFile, BlobLayout, BlobWriter};
    let mut w = BlobWriter::new(BlobLayout::Aligned);
    let off = w.add_unsigned(6, &[1, 2, 3]).unwrap();
    let mut bytes = w.finish();
    for bad in [u64::MAX, 24, 5] {
        bytes[off as usize + 24..off as usize + 32].copy_from_slice(&bad.to_le_bytes());
        let file = BlobFile::parse(&bytes).unwrap();
        assert!(
            file.blob_at(off).unwrap().to_unsigned().is_err(),
            "padding {bad}"
        );
    }
}
