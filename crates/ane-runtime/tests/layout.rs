//! Strided surface layouts: flat vs planar at fp16 widths 1, 16, 32, 64,
//! offsets checked against hand-computed byte positions.

#![allow(clippy::unwrap_used)]

use anedvd_ane_runtime::layout::{pack, pack_f16, round_up_64, unpack, ElemType, TensorLayout};
use anedvd_ane_runtime::Error;
use half::f16;

fn values(n: usize) -> Vec<f32> {
    // Distinct, exactly representable in fp16.
    (0..n).map(|i| (i as f32) * 0.25 - 7.0).collect()
}

fn f16_at(buf: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([buf[at], buf[at + 1]]).to_f32()
}

#[test]
fn planar_strides_are_64_byte_rows() {
    // (width, planar row stride, flat row stride) for fp16.
    for (w, planar, flat) in [(1, 64, 2), (16, 64, 32), (32, 64, 64), (64, 128, 128)] {
        let p = TensorLayout::planar("x", ElemType::F16, 3, 1, w);
        let f = TensorLayout::flat("x", ElemType::F16, 3, 1, w);
        assert_eq!(p.row_stride, planar, "width {w}");
        assert_eq!(p.plane_stride, planar, "width {w}");
        assert_eq!(f.row_stride, flat, "width {w}");
        assert!(p.is_hw_aligned());
        assert_eq!(f.is_hw_aligned(), w % 32 == 0, "width {w}");
        assert_eq!(p == f, w % 32 == 0, "layouts coincide only at 64-byte rows");
    }
    // fp32: 16 elements already fill 64 bytes.
    let p = TensorLayout::planar("x", ElemType::F32, 2, 1, 16);
    assert_eq!(p, TensorLayout::flat("x", ElemType::F32, 2, 1, 16));
    assert_eq!(round_up_64(0), Some(64));
    assert_eq!(round_up_64(65), Some(128));
}

#[test]
fn pack_places_each_element_at_its_stride() {
    for w in [1usize, 16, 32, 64] {
        let c = 3;
        let v = values(c * w);
        for l in [
            TensorLayout::planar("x", ElemType::F16, c, 1, w),
            TensorLayout::flat("x", ElemType::F16, c, 1, w),
        ] {
            let mut buf = vec![0xAAu8; l.alloc_size() + 16];
            pack(&l, &v, &mut buf).unwrap();
            for ci in 0..c {
                for wi in 0..w {
                    let at = ci * l.plane_stride + wi * 2;
                    assert_eq!(f16_at(&buf, at), v[ci * w + wi], "w={w} c={ci} x={wi}");
                }
                // Row padding is zeroed.
                let pad = &buf[(ci * l.plane_stride + w * 2)..((ci + 1) * l.plane_stride)];
                assert!(pad.iter().all(|&b| b == 0), "padding at width {w}");
            }
            // Bytes past the tensor's extent are untouched.
            assert!(buf[l.alloc_size()..].iter().all(|&b| b == 0xAA));
            assert_eq!(unpack(&l, &buf).unwrap(), v);
        }
    }
}

#[test]
fn flat_and_planar_bytes_differ_below_32_wide() {
    for w in [1usize, 16, 32, 64] {
        let v = values(4 * w);
        let p = TensorLayout::planar("x", ElemType::F16, 4, 1, w);
        let f = TensorLayout::flat("x", ElemType::F16, 4, 1, w);
        let mut bp = vec![0u8; p.alloc_size()];
        let mut bf = vec![0u8; f.alloc_size()];
        pack(&p, &v, &mut bp).unwrap();
        pack(&f, &v, &mut bf).unwrap();
        assert_eq!(bp == bf, w % 32 == 0, "width {w}");
        // Reading planar bytes as if flat scrambles them (what happens when
        // strides are assumed instead of read back).
        if w % 32 != 0 {
            let wrong = unpack(&f, &bp).unwrap();
            assert_ne!(wrong, v, "width {w}");
        }
    }
}

#[test]
fn height_rows_and_f32_elements() {
    // [C=2, H=3, W=5] fp32 with a padded plane.
    let mut l = TensorLayout::planar("t", ElemType::F32, 2, 3, 5);
    l.plane_stride += 64;
    let v = values(30);
    let mut buf = vec![0u8; l.alloc_size()];
    pack(&l, &v, &mut buf).unwrap();
    let at = l.plane_stride + 2 * l.row_stride + 4 * 4; // (c=1, h=2, w=4)
    let got = f32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
    assert_eq!(got, v[15 + 2 * 5 + 4]);
    assert_eq!(unpack(&l, &buf).unwrap(), v);
    let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    pack_f16(&l, &h, &mut buf).unwrap();
    assert_eq!(unpack(&l, &buf).unwrap(), v);
}

#[test]
fn inconsistent_layouts_and_sizes_are_errors() {
    let good = TensorLayout::planar("x", ElemType::F16, 2, 1, 16);
    let mut buf = vec![0u8; good.alloc_size()];
    let too_few = pack(&good, &values(31), &mut buf);
    assert!(matches!(too_few, Err(Error::Layout { .. })), "{too_few:?}");
    let small = pack(&good, &values(32), &mut buf[..100]);
    assert!(matches!(small, Err(Error::Layout { .. })), "{small:?}");
    let mut bad = good.clone();
    bad.row_stride = 30; // < 16 × 2
    assert!(bad.validate().is_err());
    let mut bad = good.clone();
    bad.plane_stride = 32; // < row stride
    assert!(bad.validate().is_err());
    let mut bad = good;
    bad.channels = usize::MAX;
    assert!(bad.validate().is_err());
}
