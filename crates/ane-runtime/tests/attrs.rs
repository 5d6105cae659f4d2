//! `modelAttributes` parsing from a property list shaped like the dumps
//! tmc/apple `x/ane` parses (`NetworkStatusList[0].LiveInputList`, …).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use anedvd_ane_runtime::attrs::{parse_attributes, Plist};
use anedvd_ane_runtime::ElemType;

fn dict(kv: &[(&str, Plist)]) -> Plist {
    Plist::Dict(
        kv.iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn s(v: &str) -> Plist {
    Plist::Str(v.into())
}

fn entry(name: &str, c: i64, w: i64, row: i64, plane: i64, ty: &str) -> Plist {
    dict(&[
        ("Name", s(name)),
        ("Symbol", s(name)),
        ("Channels", Plist::Int(c)),
        ("Height", Plist::Int(1)),
        ("Width", Plist::Int(w)),
        ("RowStride", Plist::Int(row)),
        ("PlaneStride", Plist::Int(plane)),
        ("Type", s(ty)),
    ])
}

fn attrs(inputs: Vec<Plist>, outputs: Vec<Plist>, in_syms: Option<Vec<&str>>) -> Plist {
    let status = dict(&[
        ("LiveInputList", Plist::Array(inputs)),
        ("LiveOutputList", Plist::Array(outputs)),
    ]);
    let mut top = vec![("NetworkStatusList", Plist::Array(vec![status]))];
    if let Some(syms) = in_syms {
        top.push((
            "ANEFModelDescription",
            dict(&[(
                "kANEFModelInputSymbolsArrayKey",
                Plist::Array(syms.into_iter().map(s).collect()),
            )]),
        ));
    }
    dict(&top)
}

#[test]
fn reads_strides_types_and_symbol_order() {
    let a = attrs(
        vec![
            entry("x", 768, 1, 64, 64, "Float16"),
            entry("k", 64, 16, 64, 64, "Float32"),
        ],
        vec![entry("y", 768, 1, 64, 64, "Float16")],
        Some(vec!["k", "x"]),
    );
    let m = parse_attributes(&a).unwrap();
    assert_eq!(m.inputs[0].name, "k");
    assert_eq!(m.inputs[0].elem, ElemType::F32);
    assert_eq!(m.inputs[1].name, "x");
    assert_eq!((m.inputs[1].channels, m.inputs[1].width), (768, 1));
    assert_eq!(m.inputs[1].row_stride, 64);
    assert_eq!(m.outputs[0].alloc_size(), 768 * 64);
    // Without the symbol arrays, list order is kept.
    let a = attrs(
        vec![
            entry("x", 2, 32, 64, 64, "Float16"),
            entry("k", 2, 32, 64, 64, "Float16"),
        ],
        vec![entry("y", 2, 32, 64, 64, "Float16")],
        None,
    );
    assert_eq!(parse_attributes(&a).unwrap().inputs[0].name, "x");
}

#[test]
fn malformed_attributes_are_errors() {
    let out = || vec![entry("y", 2, 32, 64, 64, "Float16")];
    for bad in [
        entry("x", -1, 32, 64, 64, "Float16"), // negative channels
        entry("x", 2, 32, 32, 64, "Float16"),  // row stride < width·2
        entry("x", 2, 32, 64, 32, "Float16"),  // plane < row
        entry("x", 2, 32, 64, 64, "Int8"),     // unknown type
        dict(&[("Name", s("x"))]),             // no numbers
    ] {
        assert!(
            parse_attributes(&attrs(vec![bad.clone()], out(), None)).is_err(),
            "{bad:?}"
        );
    }
    assert!(parse_attributes(&dict(&[])).is_err());
    assert!(parse_attributes(&Plist::Array(vec![])).is_err());
}
