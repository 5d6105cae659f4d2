//! Parsing `modelAttributes` (ane-spec.md §6.3) from a plain property-list value.
//!
//! The private driver converts the framework's `NSDictionary` into a
//! [`Plist`] first, so everything here is ordinary Rust, tested on every OS.

use std::collections::BTreeMap;

use super::driver::ModelAttributes;
use super::error::{Error, Op, Result};
use super::layout::{ElemType, TensorLayout};

/// A property-list value as read from Foundation objects.
#[derive(Debug, Clone, PartialEq)]
pub enum Plist {
    /// `NSDictionary` with string keys.
    Dict(BTreeMap<String, Plist>),
    /// `NSArray`.
    Array(Vec<Plist>),
    /// `NSNumber` (integral value).
    Int(i64),
    /// `NSString`.
    Str(String),
    /// Anything else (kept as its description).
    Other(String),
}

impl Plist {
    /// `self[key]` for dictionaries.
    pub fn get(&self, key: &str) -> Option<&Plist> {
        match self {
            Plist::Dict(d) => d.get(key),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&[Plist]> {
        match self {
            Plist::Array(a) => Some(a),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Plist::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            Plist::Int(i) => Some(*i),
            Plist::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

fn bad(msg: String) -> Error {
    Error::driver(Op::Attributes, msg)
}

fn entry(e: &Plist, list: &str, i: usize) -> Result<TensorLayout> {
    let at = format!("{list}[{i}]");
    let name = e
        .get("Name")
        .and_then(Plist::as_str)
        .or_else(|| e.get("Symbol").and_then(Plist::as_str))
        .ok_or_else(|| bad(format!("{at}: no Name")))?
        .to_string();
    let symbol = e
        .get("Symbol")
        .and_then(Plist::as_str)
        .unwrap_or(&name)
        .to_string();
    let num = |k: &str, default: Option<usize>| -> Result<usize> {
        match e.get(k).and_then(Plist::as_int) {
            Some(v) => usize::try_from(v).map_err(|_| bad(format!("{at} ({name}): {k} = {v}"))),
            None => default.ok_or_else(|| bad(format!("{at} ({name}): no {k}"))),
        }
    };
    let elem = match e.get("Type").and_then(Plist::as_str) {
        None => ElemType::F16,
        Some(t) if t.contains("16") => ElemType::F16,
        Some(t) if t.contains("32") => ElemType::F32,
        Some(t) => return Err(bad(format!("{at} ({name}): unsupported Type {t}"))),
    };
    let l = TensorLayout {
        channels: num("Channels", None)?,
        height: num("Height", Some(1))?,
        width: num("Width", None)?,
        row_stride: num("RowStride", None)?,
        plane_stride: num("PlaneStride", None)?,
        name,
        symbol,
        elem,
    };
    l.validate()?;
    Ok(l)
}

fn list(status: &Plist, key: &str) -> Result<Vec<TensorLayout>> {
    let arr = status
        .get(key)
        .and_then(Plist::as_array)
        .ok_or_else(|| bad(format!("NetworkStatusList[0] has no {key}")))?;
    arr.iter()
        .enumerate()
        .map(|(i, e)| entry(e, key, i))
        .collect()
}

/// Orders `layouts` by the symbol array `key` of `ANEFModelDescription`
/// when it is present and names every layout; otherwise keeps list order.
fn order(layouts: &mut [TensorLayout], attrs: &Plist, key: &str) {
    let Some(syms) = attrs
        .get("ANEFModelDescription")
        .and_then(|d| d.get(key))
        .and_then(Plist::as_array)
    else {
        return;
    };
    let syms: Vec<&str> = syms.iter().filter_map(Plist::as_str).collect();
    let pos = |l: &TensorLayout| syms.iter().position(|s| *s == l.symbol || *s == l.name);
    if syms.len() == layouts.len() && layouts.iter().all(|l| pos(l).is_some()) {
        layouts.sort_by_key(|l| pos(l).unwrap_or(usize::MAX));
    }
}

/// Reads procedure 0's `LiveInputList`/`LiveOutputList` from `modelAttributes`,
/// in binding order (the symbol arrays of `ANEFModelDescription` when
/// present, else the lists' order).
pub fn parse_attributes(attrs: &Plist) -> Result<ModelAttributes> {
    let status = attrs
        .get("NetworkStatusList")
        .and_then(Plist::as_array)
        .and_then(|a| a.first())
        .ok_or_else(|| bad("modelAttributes has no NetworkStatusList[0]".into()))?;
    let mut inputs = list(status, "LiveInputList")?;
    let mut outputs = list(status, "LiveOutputList")?;
    order(&mut inputs, attrs, "kANEFModelInputSymbolsArrayKey");
    order(&mut outputs, attrs, "kANEFModelOutputSymbolsArrayKey");
    Ok(ModelAttributes { inputs, outputs })
}
