//! The malformed-safetensors battery: each case takes one valid Hugging
//! Face directory (`config.json` + `model.safetensors`, written here), makes
//! one visible mutation of the safetensors file, opens the directory the way
//! the engine does ([`anedvd_weights::open`]) and checks that the refusal
//! names the file and the tensor and header field at fault.
#![allow(clippy::unwrap_used)]

use anedvd_weights::{open, Error};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The valid base: three tensors of three dtypes, 28 data bytes, their
/// offsets tiling the data section in header order.
fn base_header() -> Value {
    json!({
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "F16", "shape": [4], "data_offsets": [16, 24]},
        "c": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
    })
}

fn base_data() -> Vec<u8> {
    (0..28u8).collect()
}

/// A safetensors file: the header length, the header, the data.
fn file_bytes(header: &Value, data: &[u8]) -> Vec<u8> {
    let header = header.to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A model directory holding `bytes` as its `model.safetensors`; returns
/// the directory and the file's path.
fn model_dir(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    let file = dir.path().join("model.safetensors");
    std::fs::write(&file, bytes).unwrap();
    (dir, file)
}

/// Opens the directory holding `bytes`, expects a refusal naming the file
/// and every one of `needles`, and returns the error.
fn refused(bytes: &[u8], needles: &[&str]) -> Error {
    let (dir, file) = model_dir(bytes);
    let err = match open(dir.path()) {
        Ok(_) => panic!("opened a malformed file; expected an error naming {needles:?}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(
        msg.contains(&file.display().to_string()),
        "message does not name the file {}: {msg}",
        file.display()
    );
    for needle in needles {
        assert!(msg.contains(needle), "message lacks `{needle}`: {msg}");
    }
    err
}

fn refused_header(header: &Value, needles: &[&str]) -> Error {
    refused(&file_bytes(header, &base_data()), needles)
}

#[test]
fn the_base_opens_and_reads_back() {
    let (dir, _file) = model_dir(&file_bytes(&base_header(), &base_data()));
    let model = open(dir.path()).unwrap();
    let c = model.source.tensor("c").unwrap();
    assert_eq!(c.data, &[24, 25, 26, 27]);
    assert_eq!(model.source.tensor("a").unwrap().info.shape, vec![2, 2]);
}

#[test]
fn header_entries_out_of_offset_order_are_valid() {
    // Older writers listed tensors by name, not by offset: still one tiling.
    let header = json!({
        "c": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
        "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "F16", "shape": [4], "data_offsets": [16, 24]},
    });
    let (dir, _file) = model_dir(&file_bytes(&header, &base_data()));
    let model = open(dir.path()).unwrap();
    assert_eq!(model.source.tensor("b").unwrap().data, &base_data()[16..24]);
}

#[test]
fn header_length_beyond_the_file() {
    let mut bytes = file_bytes(&base_header(), &base_data());
    let len = bytes.len() as u64;
    bytes[..8].copy_from_slice(&(len + 1000).to_le_bytes());
    refused(&bytes, &["header length", "runs past the end of the file"]);
}

#[test]
fn header_length_absurd() {
    let mut bytes = file_bytes(&base_header(), &base_data());
    bytes[..8].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
    refused(
        &bytes,
        &["header length 18446744073709551608", "exceeds the limit"],
    );
}

#[test]
fn file_shorter_than_the_length_prefix() {
    refused(&[1, 0, 0], &["too short for the 8-byte header length"]);
}

#[test]
fn header_not_json() {
    let mut bytes = file_bytes(&base_header(), &base_data());
    bytes[8] = b'#';
    refused(&bytes, &["header is not valid JSON"]);
    let not_object = file_bytes(&json!([1, 2]), &[]);
    refused(&not_object, &["header is not a JSON object"]);
}

#[test]
fn overlapping_data_offsets() {
    let mut h = base_header();
    h["b"]["data_offsets"] = json!([12, 20]);
    h["c"]["data_offsets"] = json!([20, 24]);
    refused_header(
        &h,
        &[
            "tensor `b`",
            "data_offsets",
            "[12, 20] overlaps",
            "`a` [0, 16]",
        ],
    );
}

#[test]
fn data_offsets_end_before_they_begin() {
    let mut h = base_header();
    h["a"]["data_offsets"] = json!([16, 0]);
    refused_header(&h, &["tensor `a`", "data_offsets", "ends before it begins"]);
}

#[test]
fn gap_between_tensors() {
    let mut h = base_header();
    h["c"]["data_offsets"] = json!([26, 30]);
    let mut data = base_data();
    data.extend([0, 0]);
    refused(
        &file_bytes(&h, &data),
        &["tensor `c`", "data_offsets", "bytes 24..26"],
    );
}

#[test]
fn data_offsets_past_the_end() {
    let mut h = base_header();
    h["c"]["shape"] = json!([4]);
    h["c"]["data_offsets"] = json!([24, 32]);
    refused_header(
        &h,
        &["tensor `c`", "data_offsets", "[24, 32] runs past the end"],
    );
}

#[test]
fn truncated_data() {
    let mut bytes = file_bytes(&base_header(), &base_data());
    bytes.truncate(bytes.len() - 3);
    refused(&bytes, &["tensor `c`", "data_offsets", "truncated"]);
}

#[test]
fn trailing_bytes_after_the_last_tensor() {
    let mut data = base_data();
    data.extend([9; 5]);
    refused(
        &file_bytes(&base_header(), &data),
        &["data section has 33 bytes", "end at byte 28"],
    );
}

#[test]
fn dtype_times_shape_differs_from_the_byte_length() {
    let mut h = base_header();
    h["a"]["shape"] = json!([2, 3]);
    refused_header(
        &h,
        &[
            "tensor `a`",
            "data_offsets",
            "hold 16 bytes",
            "F32 × shape [2, 3] needs 24",
        ],
    );
    let mut h = base_header();
    h["b"]["dtype"] = json!("F32");
    refused_header(&h, &["tensor `b`", "F32 × shape [4] needs 16"]);
}

#[test]
fn unknown_dtype() {
    let mut h = base_header();
    h["b"]["dtype"] = json!("Q9_9");
    refused_header(&h, &["tensor `b`", "dtype", "unknown dtype `Q9_9`"]);
    h["b"]["dtype"] = json!(16);
    refused_header(&h, &["tensor `b`", "dtype", "expected a string"]);
}

#[test]
fn known_dtype_without_a_ggml_type() {
    let mut h = base_header();
    h["c"]["dtype"] = json!("U16");
    let e = refused_header(&h, &["tensor `c`", "dtype U16 is not supported"]);
    assert!(matches!(e, Error::UnsupportedDtype { .. }), "{e:?}");
}

#[test]
fn shape_that_overflows() {
    let mut h = base_header();
    h["a"]["shape"] = json!([4294967296u64, 4294967296u64, 16]);
    refused_header(&h, &["tensor `a`", "shape", "overflows"]);
    h["a"]["shape"] = json!([2, -2]);
    refused_header(
        &h,
        &["tensor `a`", "shape", "-2 is not a non-negative integer"],
    );
}

#[test]
fn malformed_entries() {
    let mut h = base_header();
    h["b"].as_object_mut().unwrap().remove("data_offsets");
    refused_header(&h, &["tensor `b`", "data_offsets: missing"]);
    let mut h = base_header();
    h["b"]["data_offsets"] = json!([16, 20, 24]);
    refused_header(&h, &["tensor `b`", "data_offsets", "found 3 numbers"]);
    let mut h = base_header();
    h["b"] = json!("F16");
    refused_header(&h, &["tensor `b`", "not a JSON object"]);
    let mut h = base_header();
    h["__metadata__"] = json!({"format": 1});
    refused_header(&h, &["`__metadata__`"]);
}
