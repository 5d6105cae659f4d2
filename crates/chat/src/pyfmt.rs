//! Python-compatible printing of template values: `str()`/`repr()` output and `json.dumps`.
//!
//! Jinja2 prints values with Python's `str()`, so `{{ true }}` is `True` and a dict prints as
//! `{'a': 1}`; transformers' `tojson` filter is `json.dumps(x, ensure_ascii=False, indent=None,
//! separators=None, sort_keys=False)`. These functions reproduce both over minijinja values.

use std::fmt::Write as _;

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Python's `repr()` of a float (shortest round-trip digits, exponent form outside 1e-4..1e16).
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m.to_owned(), e.parse::<i32>().unwrap_or(0)),
        None => (sci.clone(), 0),
    };
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// Python's `str.isspace()` for one character.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.title()`: a cased character after a cased one is lowered, any other is raised.
pub fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        let cased = c.is_uppercase() || c.is_lowercase();
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = cased;
    }
    out
}

/// Python's `repr()` of a string: single quotes unless the text has `'` and no `"`.
fn str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn number_str(v: &Value) -> String {
    if v.is_integer() {
        v.to_string()
    } else {
        match f64::try_from(v.clone()) {
            Ok(f) => float_repr(f),
            Err(_) => v.to_string(),
        }
    }
}

/// Python's `str()` of a value: strings as they are, everything else as `repr()`.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_owned(),
        ValueKind::Undefined => String::new(),
        _ => {
            let mut out = String::new();
            py_repr(&mut out, v);
            out
        }
    }
}

/// Python's `repr()` of a value (lists as `[...]`, dicts as `{'k': v}`, `None`, `True`, ...).
pub fn py_repr(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number_str(v)),
        ValueKind::String => str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(iter) = v.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(out, &item);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(iter) = v.try_iter() {
                for (i, key) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(out, &key);
                    out.push_str(": ");
                    py_repr(out, &v.get_item(&key).unwrap_or_default());
                }
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
}

/// Options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// Escape non-ASCII characters as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Pretty-print with this indent string (an int `n` means `n` spaces).
    pub indent: Option<String>,
    /// `(item_separator, key_separator)`; defaults depend on `indent` as in Python.
    pub separators: Option<(String, String)>,
    /// Sort object keys.
    pub sort_keys: bool,
}

fn json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Dumper<'a> {
    opts: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl Dumper<'_> {
    fn newline(&self, out: &mut String, level: usize) {
        if let Some(ind) = &self.opts.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    }

    fn key(&self, out: &mut String, key: &Value) -> Result<(), Error> {
        match key.kind() {
            ValueKind::String => json_str(
                out,
                key.as_str().unwrap_or_default(),
                self.opts.ensure_ascii,
            ),
            ValueKind::Number => {
                out.push('"');
                out.push_str(&number_str(key));
                out.push('"');
            }
            ValueKind::Bool => out.push_str(if key.is_true() {
                "\"true\""
            } else {
                "\"false\""
            }),
            ValueKind::None => out.push_str("\"null\""),
            k => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("keys must be str, int, float, bool or None, not {k}"),
                ))
            }
        }
        Ok(())
    }

    fn dump(&self, out: &mut String, v: &Value, level: usize) -> Result<(), Error> {
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                let s = number_str(v);
                out.push_str(match s.as_str() {
                    "nan" => "NaN",
                    "inf" => "Infinity",
                    "-inf" => "-Infinity",
                    other => other,
                });
            }
            ValueKind::String => {
                json_str(out, v.as_str().unwrap_or_default(), self.opts.ensure_ascii)
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, level + 1);
                    self.dump(out, item, level + 1)?;
                }
                self.newline(out, level);
                out.push(']');
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.opts.sort_keys {
                    keys.sort();
                }
                out.push('{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, level + 1);
                    self.key(out, key)?;
                    out.push_str(self.key_sep);
                    self.dump(out, &v.get_item(key)?, level + 1)?;
                }
                self.newline(out, level);
                out.push('}');
            }
            k => {
                let name = if k == ValueKind::Undefined {
                    "Undefined".to_owned()
                } else {
                    k.to_string()
                };
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("Object of type {name} is not JSON serializable"),
                ));
            }
        }
        Ok(())
    }
}

/// Python's `json.dumps(v, ...)` with the given options.
pub fn json_dumps(v: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((a, b)) => (a.as_str(), b.as_str()),
        None if opts.indent.is_some() => (",", ": "),
        None => (", ", ": "),
    };
    let dumper = Dumper {
        opts,
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    dumper.dump(&mut out, v, 0)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_python() {
        assert_eq!(float_repr(1.0), "1.0");
        assert_eq!(float_repr(0.1), "0.1");
        assert_eq!(float_repr(1e16), "1e+16");
        assert_eq!(float_repr(1.5e-5), "1.5e-05");
        assert_eq!(float_repr(123456.789), "123456.789");
        assert_eq!(float_repr(-2.5), "-2.5");
    }

    #[test]
    fn repr_like_python() {
        let v = Value::from_serialize(serde_json::json!({"a": [1, 2.5, true, null, "it's"]}));
        let mut s = String::new();
        py_repr(&mut s, &v);
        assert_eq!(s, "{'a': [1, 2.5, True, None, \"it's\"]}");
    }

    #[test]
    fn dumps_like_python() {
        let v = Value::from_serialize(serde_json::json!({"b": [1, {"c": "é\n"}], "a": {}}));
        let plain = json_dumps(&v, &DumpOptions::default()).unwrap_or_default();
        assert_eq!(plain, "{\"b\": [1, {\"c\": \"é\\n\"}], \"a\": {}}");
        let opts = DumpOptions {
            indent: Some("  ".into()),
            sort_keys: true,
            ..Default::default()
        };
        let pretty = json_dumps(&v, &opts).unwrap_or_default();
        assert_eq!(
            pretty,
            "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"c\": \"é\\n\"\n    }\n  ]\n}"
        );
        let ascii = DumpOptions {
            ensure_ascii: true,
            ..Default::default()
        };
        assert_eq!(
            json_dumps(&Value::from("é😀"), &ascii).unwrap_or_default(),
            "\"\\u00e9\\ud83d\\ude00\""
        );
    }
}
