//! Flattens a Hugging Face `config.json` into [`Metadata`] with dotted keys.

use anedvd_base::{Metadata, MetadataArray, MetadataValue, PackedStrings};
use serde_json::Value;

/// Flattens a JSON object into `out`: nested objects become dotted keys
/// (`rope_scaling.rope_type`), integers `I64` (`U64` above `i64::MAX`),
/// floats `F64`, strings, bools, and arrays of scalars (or of such arrays)
/// homogeneous arrays. Nulls, arrays holding objects or nulls, and arrays
/// mixing strings/bools/numbers are omitted. An empty array becomes an empty
/// `I64` array. Integer arrays containing a float become `F64` arrays.
pub fn flatten_config(object: &serde_json::Map<String, Value>, out: &mut Metadata) {
    flatten_into(object, "", out);
}

fn flatten_into(object: &serde_json::Map<String, Value>, prefix: &str, out: &mut Metadata) {
    for (key, value) in object {
        let key = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Object(inner) => flatten_into(inner, &key, out),
            other => {
                if let Some(v) = convert(other) {
                    out.insert(key, v);
                }
            }
        }
    }
}

fn convert(value: &Value) -> Option<MetadataValue> {
    match value {
        Value::Null | Value::Object(_) => None,
        Value::Bool(b) => Some(MetadataValue::Bool(*b)),
        Value::String(s) => Some(MetadataValue::String(s.clone())),
        Value::Number(n) => Some(number(n)),
        Value::Array(items) => array(items).map(MetadataValue::Array),
    }
}

fn number(n: &serde_json::Number) -> MetadataValue {
    if let Some(i) = n.as_i64() {
        MetadataValue::I64(i)
    } else if let Some(u) = n.as_u64() {
        MetadataValue::U64(u)
    } else {
        MetadataValue::F64(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn array(items: &[Value]) -> Option<MetadataArray> {
    use MetadataArray as A;
    if items.is_empty() {
        return Some(A::I64(Vec::new()));
    }
    if items.iter().all(Value::is_number) {
        let nums: Vec<&serde_json::Number> = items.iter().filter_map(Value::as_number).collect();
        let ints: Option<Vec<i64>> = nums.iter().map(|n| n.as_i64()).collect();
        let uints: Option<Vec<u64>> = nums.iter().map(|n| n.as_u64()).collect();
        return Some(match (ints, uints) {
            (Some(v), _) => A::I64(v),
            (None, Some(v)) => A::U64(v),
            (None, None) => A::F64(nums.iter().filter_map(|n| n.as_f64()).collect()),
        });
    }
    Some(match items.first()? {
        Value::Bool(_) => A::Bool(items.iter().map(Value::as_bool).collect::<Option<_>>()?),
        Value::String(_) => {
            let strs: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            A::String(PackedStrings::from_strs(strs?).ok()?)
        }
        Value::Array(_) => A::Array(
            items
                .iter()
                .map(|v| v.as_array().and_then(|a| array(a)))
                .collect::<Option<_>>()?,
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use MetadataValue as V;

    #[test]
    fn flattens_nested_and_typed() {
        let json: Value = serde_json::from_str(
            r#"{
              "hidden_size": 640, "rms_norm_eps": 1e-6, "name": "x", "tie": true,
              "nothing": null, "big": 18446744073709551615,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0, "deep": {"a": -1}},
              "eos_token_id": [1, 106], "mix": [1, 2.5], "strs": ["a", "b"],
              "bad": [1, "a"], "objs": [{"a": 1}], "nulls": [null], "empty": [],
              "nested": [[1, 2], [3]], "big_arr": [18446744073709551615, 1],
              "bools": [true, false], "mixed_bools": [true, 1], "layer_types": ["sliding_attention", "full_attention"]
            }"#,
        )
        .unwrap();
        let mut m = Metadata::new();
        flatten_config(json.as_object().unwrap(), &mut m);
        assert_eq!(m.get("hidden_size"), Some(&V::I64(640)));
        assert_eq!(m.get("rms_norm_eps"), Some(&V::F64(1e-6)));
        assert_eq!(m.get("name"), Some(&V::String("x".into())));
        assert_eq!(m.get("tie"), Some(&V::Bool(true)));
        assert_eq!(m.get("big"), Some(&V::U64(u64::MAX)));
        assert!(!m.contains("nothing"));
        assert_eq!(
            m.get("rope_scaling.rope_type"),
            Some(&V::String("linear".into()))
        );
        assert_eq!(m.get("rope_scaling.factor"), Some(&V::F64(8.0)));
        assert_eq!(m.get("rope_scaling.deep.a"), Some(&V::I64(-1)));
        assert!(!m.contains("rope_scaling"));
        assert_eq!(
            m.get("eos_token_id"),
            Some(&V::Array(vec![1i64, 106].into()))
        );
        assert_eq!(m.get("mix"), Some(&V::Array(vec![1.0f64, 2.5].into())));
        assert_eq!(m.array("strs").unwrap().len(), 2);
        assert_eq!(m.array("layer_types").unwrap().len(), 2);
        assert!(!m.contains("bad") && !m.contains("objs") && !m.contains("nulls"));
        assert!(!m.contains("mixed_bools"));
        assert_eq!(m.get("empty"), Some(&V::Array(Vec::<i64>::new().into())));
        assert_eq!(
            m.array("strs").unwrap().as_strings().unwrap().get(1),
            Some("b")
        );
        assert_eq!(m.get("big_arr"), Some(&V::Array(vec![u64::MAX, 1].into())));
        assert_eq!(m.get("bools"), Some(&V::Array(vec![true, false].into())));
        assert_eq!(
            m.get("nested"),
            Some(&V::Array(
                vec![
                    MetadataArray::from(vec![1i64, 2]),
                    MetadataArray::from(vec![3i64])
                ]
                .into()
            ))
        );
    }
}
