//! Hostile-input tests: hand-built byte buffers (not made by our writer) that
//! the reader must refuse with the right error, never a panic.
#![allow(clippy::unwrap_used)]

use anedvd_gguf::{Error, GgufFile};
use proptest::prelude::*;

/// A raw little-endian byte builder for GGUF files.
#[derive(Clone, Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw::default();
        r.bytes(b"GGUF").u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A key with a u32 value (type tag 4).
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info: name, dims, ggml type id, relative offset.
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Zero padding up to a multiple of `align`.
    fn pad(&mut self, align: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn parse(&self) -> Result<GgufFile, Error> {
        GgufFile::from_bytes(self.0.clone())
    }
}

const F32: u32 = 0;
const Q8_0: u32 = 8;

/// A valid v3 file: two kvs (one a string array), two F32 tensors, no
/// trailing padding (so every strict prefix is invalid).
fn valid() -> Raw {
    let mut r = Raw::header(3, 2, 2);
    r.kv_u32("general.alignment", 32);
    r.str("tokens").u32(9).u32(8).u64(2).str("ab").str("c");
    r.tensor("a", &[4, 2], F32, 0).tensor("b", &[3], F32, 32);
    r.pad(32).zeros(32).zeros(12);
    r
}

#[test]
fn valid_file_parses() {
    let f = valid().parse().unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.tensors().len(), 2);
    assert_eq!(f.tensor("b").unwrap().data.len(), 12);
    assert_eq!(f.file_size(), f.data_offset() + 44);
}

#[test]
fn v2_parses_like_v3() {
    let mut v2 = valid();
    v2.0[4] = 2;
    let (a, b) = (v2.parse().unwrap(), valid().parse().unwrap());
    assert_eq!(a.version(), 2);
    assert_eq!(a.tensors(), b.tensors());
    assert_eq!(a.data_offset(), b.data_offset());
}

#[test]
fn every_truncation_is_an_error() {
    let full = valid().0;
    for len in 0..full.len() {
        let r = GgufFile::from_bytes(full[..len].to_vec());
        assert!(r.is_err(), "prefix of {len} bytes parsed");
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut r = valid();
    r.0[..4].copy_from_slice(b"GGML");
    assert!(matches!(r.parse(), Err(Error::BadMagic { .. })));
    let mut r = valid();
    r.0[4..8].copy_from_slice(&1u32.to_le_bytes());
    let e = r.parse().unwrap_err();
    assert!(matches!(e, Error::UnsupportedVersion { version: 1, .. }));
    assert!(e.to_string().contains("v1"), "{e}");
    let mut r = valid();
    r.0[4..8].copy_from_slice(&4u32.to_le_bytes());
    assert!(matches!(
        r.parse(),
        Err(Error::UnsupportedVersion { version: 4, .. })
    ));
    // A big-endian file: version 3 stored big-endian.
    let mut r = Raw::default();
    r.bytes(b"GGUF")
        .bytes(&3u32.to_be_bytes())
        .bytes(&0u64.to_be_bytes());
    r.bytes(&0u64.to_be_bytes());
    let e = r.parse().unwrap_err();
    assert!(matches!(e, Error::BigEndian { .. }));
    assert!(e.to_string().contains("big-endian"), "{e}");
}

#[test]
fn absurd_counts() {
    let r = Raw::header(3, u64::MAX, 0);
    assert!(matches!(
        r.parse(),
        Err(Error::CountTooLarge {
            what: "tensor",
            offset: 8,
            ..
        })
    ));
    let r = Raw::header(3, 0, u64::MAX);
    assert!(matches!(
        r.parse(),
        Err(Error::CountTooLarge { offset: 16, .. })
    ));
    // Counts that would fit a 1 TB file but not this one.
    let mut r = Raw::header(3, 1 << 30, 1);
    r.kv_u32("k", 1);
    assert!(matches!(r.parse(), Err(Error::CountTooLarge { .. })));
    // kv count larger than the entries present.
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1);
    assert!(r.parse().is_err());
}

#[test]
fn string_lengths_past_eof() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX).bytes(b"key").zeros(16);
    assert!(matches!(
        r.parse(),
        Err(Error::Truncated { offset: 32, .. })
    ));
    let mut r = Raw::header(3, 0, 1);
    r.str("key").u32(8).u64(1 << 40).bytes(b"xx");
    assert!(matches!(r.parse(), Err(Error::Truncated { .. })));
    let mut r = Raw::header(3, 1, 0);
    r.u64(1000).bytes(&[b'a'; 30]);
    assert!(r.parse().is_err());
}

#[test]
fn array_lengths_checked_before_allocating() {
    for elem in [0u32, 4, 8, 9, 10] {
        for len in [u64::MAX / 2, 1000] {
            let mut r = Raw::header(3, 0, 1);
            r.str("arr").u32(9).u32(elem).u64(len).zeros(64);
            assert!(
                matches!(r.parse(), Err(Error::CountTooLarge { .. })),
                "element type {elem}, length {len}"
            );
        }
    }
}

#[test]
fn bad_array_elements_name_their_offset() {
    // A bool array holding a 2 at its third element: header 24, key 8 + 3,
    // tags 4 + 4, length 8, then two elements.
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(7).u64(3).bytes(&[1, 0, 2]);
    assert!(matches!(
        r.parse(),
        Err(Error::BadBool {
            value: 2,
            offset: 53,
            ..
        })
    ));
    // Invalid UTF-8 in the second string of a string array.
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(8).u64(2).str("ok");
    r.u64(1).u8(0xff);
    assert!(matches!(r.parse(), Err(Error::InvalidUtf8 { offset: 61 })));
    // The second string claims more bytes than are left: refused before the
    // packed buffer is allocated.
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(8).u64(2).str("ok");
    r.u64(u64::MAX / 2).zeros(8);
    assert!(matches!(
        r.parse(),
        Err(Error::Truncated {
            offset: 69,
            what: "metadata string",
            ..
        })
    ));
    // Arrays of numbers parse into their typed storage.
    let mut r = Raw::header(3, 0, 1);
    r.str("f").u32(9).u32(6).u64(2);
    r.bytes(&0.5f32.to_le_bytes()).bytes(&(-2f32).to_le_bytes());
    let f = r.parse().unwrap();
    let a = f.metadata().array("f").unwrap();
    assert_eq!(a.as_f32_slice(), Some(&[0.5, -2.0][..]));
}

#[test]
fn array_length_is_capped() {
    // 2^24 + 1 one-byte elements: the bytes are there, the length is refused.
    let n = (anedvd_gguf::MAX_ARRAY_LEN + 1) as usize;
    let mut r = Raw::header(3, 0, 1);
    r.str("big").u32(9).u32(0).u64(n as u64).zeros(n);
    assert!(matches!(r.parse(), Err(Error::CountTooLarge { .. })));
}

#[test]
fn nesting_depth_is_capped() {
    let mut r = Raw::header(3, 0, 1);
    r.str("deep");
    r.u32(9);
    for _ in 0..100 {
        r.u32(9).u64(1);
    }
    r.u32(0).u64(0);
    assert!(matches!(r.parse(), Err(Error::NestingTooDeep { .. })));
}

#[test]
fn bad_values_and_keys() {
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert!(matches!(
        r.parse(),
        Err(Error::UnknownValueType { id: 13, .. })
    ));
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(77).u64(0);
    assert!(matches!(
        r.parse(),
        Err(Error::UnknownValueType { id: 77, .. })
    ));
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(7).u8(2);
    assert!(matches!(r.parse(), Err(Error::BadBool { value: 2, .. })));
    let mut r = Raw::header(3, 0, 1);
    r.str("").u32(0).u8(0).zeros(8);
    assert!(matches!(r.parse(), Err(Error::EmptyKey { offset: 24 })));
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    match r.parse() {
        Err(Error::DuplicateKey { key, offset }) => assert_eq!((key.as_str(), offset), ("k", 41)),
        other => panic!("{other:?}"),
    }
    let mut r = Raw::header(3, 0, 1);
    r.u64(2).bytes(&[0xc3, 0x28]).u32(0).u8(0);
    assert!(matches!(r.parse(), Err(Error::InvalidUtf8 { offset: 24 })));
}

#[test]
fn bad_alignment() {
    // 1 << 30 is a power of two but over the cap (a fuzzer find: the
    // round-trip writer padded to 1 GiB).
    for a in [0u32, 3, 48, 1 << 30] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", a);
        assert!(matches!(r.parse(), Err(Error::BadAlignment { .. })), "{a}");
    }
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment").u32(10).u64(32);
    assert!(matches!(r.parse(), Err(Error::BadAlignment { .. })));
}

fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Raw {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", dims, ty, offset).pad(32).zeros(data);
    r
}

#[test]
fn tensor_shape_and_type_errors() {
    assert!(matches!(
        one_tensor(&[1, 1, 1, 1, 1], F32, 0, 4).parse(),
        Err(Error::TooManyDims { n_dims: 5, .. })
    ));
    for dims in [
        &[u64::MAX][..],
        &[1 << 32, 1 << 32],
        &[1 << 63],
        &[1 << 62, 4],
    ] {
        assert!(
            matches!(
                one_tensor(dims, F32, 0, 64).parse(),
                Err(Error::ShapeOverflow { .. })
            ),
            "{dims:?}"
        );
    }
    // Elements fit i64 but bytes overflow u64.
    assert!(matches!(
        one_tensor(&[1 << 62], F32, 0, 64).parse(),
        Err(Error::ShapeOverflow { .. })
    ));
    for id in [4u32, 31, 1000, u32::MAX] {
        match one_tensor(&[4], id, 0, 64).parse() {
            Err(Error::UnknownGgmlType {
                tensor, id: got, ..
            }) => {
                assert_eq!((tensor.as_str(), got), ("t", id))
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert!(matches!(
        one_tensor(&[33], Q8_0, 0, 64).parse(),
        Err(Error::RaggedRow { .. })
    ));
    // Zero-dimensional and zero-element tensors are fine.
    assert_eq!(
        one_tensor(&[], F32, 0, 4).parse().unwrap().tensors()[0].size_bytes,
        4
    );
    assert_eq!(
        one_tensor(&[0, 7], F32, 0, 0).parse().unwrap().tensors()[0].size_bytes,
        0
    );
}

#[test]
fn tensor_data_layout_errors() {
    assert!(matches!(
        one_tensor(&[4], F32, 4, 64).parse(),
        Err(Error::MisalignedTensor { offset: 4, .. })
    ));
    assert!(matches!(
        one_tensor(&[4], F32, 0, 15).parse(),
        Err(Error::TensorOutOfBounds { .. })
    ));
    assert!(matches!(
        one_tensor(&[4], F32, 1 << 40, 64).parse(),
        Err(Error::TensorOutOfBounds { .. })
    ));
    assert!(matches!(
        one_tensor(&[4], F32, u64::MAX - 31, 64).parse(),
        Err(Error::TensorOutOfBounds { .. })
    ));
    // Header padding past EOF.
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[0], F32, 0);
    assert!(matches!(r.parse(), Err(Error::Truncated { .. })));

    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], F32, 0)
        .tensor("b", &[4], F32, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(r.parse(), Err(Error::OverlappingTensors { .. })));
    // Overlap hidden behind an empty tensor in between.
    let mut r = Raw::header(3, 3, 0);
    r.tensor("a", &[64], F32, 0)
        .tensor("e", &[0], F32, 64)
        .tensor("c", &[4], F32, 128)
        .pad(32)
        .zeros(256);
    match r.parse() {
        Err(Error::OverlappingTensors { first, second, .. }) => {
            assert_eq!((first.as_str(), second.as_str()), ("a", "c"))
        }
        other => panic!("{other:?}"),
    }
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[4], F32, 0)
        .tensor("a", &[4], F32, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(r.parse(), Err(Error::DuplicateTensor { .. })));
    // Same data shared by two names is overlap too.
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[4], F32, 0)
        .tensor("b", &[4], F32, 0)
        .pad(32)
        .zeros(64);
    assert!(matches!(r.parse(), Err(Error::OverlappingTensors { .. })));
}

#[test]
fn errors_name_their_context() {
    let e = one_tensor(&[4], 1000, 0, 64)
        .parse()
        .unwrap_err()
        .to_string();
    assert!(e.contains("`t`") && e.contains("1000"), "{e}");
    let mut r = Raw::header(3, 0, 1);
    r.str("my.key").u32(13).u32(0);
    let e = r.parse().unwrap_err().to_string();
    assert!(e.contains("my.key") && e.contains("offset 38"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Random corruption of a valid file never panics, and whatever parses
    /// hands out slices inside the file.
    #[test]
    fn corrupted_files_never_panic(edits in prop::collection::vec((0usize..200, any::<u8>()), 1..6)) {
        let mut bytes = valid().0;
        for (pos, byte) in edits {
            let i = pos % bytes.len();
            bytes[i] = byte;
        }
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            for t in f.tensors() {
                let r = f.tensor(&t.name).unwrap();
                prop_assert_eq!(r.data.len() as u64, t.size_bytes);
            }
        }
    }
}
