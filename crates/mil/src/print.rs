//! Canonical printer: one fixed whitespace form, alphabetical arguments and attributes, shortest round-trip floats.

use std::fmt::Write;

use crate::ir::{Arg, DType, Function, Program, Scalar, ScalarStyle, Statement, Value, ValueType};

/// Prints a program in the canonical form.
///
/// The form is the spaced style of the maderix/Espresso generators
/// (`name = string("x")`, `[1, 4, 1, 2]`), four-space indentation, one
/// statement per line, arguments and attributes in alphabetical order, and
/// floats printed as the shortest plain decimal that rounds back to the same
/// value in their dtype (no exponent notation, which no observed file uses).
/// `print(&parse(&print(p))?) == print(p)` for every program.
pub fn print(p: &Program) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "program({})", p.version);
    let st = p.scalar_style;
    if !p.build_info.is_empty() {
        let kt = match st {
            ScalarStyle::Short => "string",
            ScalarStyle::RankZeroTensor => "tensor<string, []>",
        };
        let entries: Vec<String> = p
            .build_info
            .iter()
            .map(|(k, v)| format!("{{{}, {}}}", quote(k), quote(v)))
            .collect();
        let _ = writeln!(
            out,
            "[buildInfo = dict<{kt}, {kt}>({{{}}})]",
            entries.join(", ")
        );
    }
    out.push_str("{\n");
    for f in &p.functions {
        print_function(&mut out, f, st);
    }
    out.push_str("}\n");
    out
}

fn print_function(out: &mut String, f: &Function, st: ScalarStyle) {
    let inputs: Vec<String> = f
        .inputs
        .iter()
        .map(|(n, t)| format!("{} {n}", type_str(&ValueType::Tensor(t.clone()))))
        .collect();
    let _ = writeln!(
        out,
        "    func {}<{}>({}) {{",
        f.name,
        f.opset,
        inputs.join(", ")
    );
    for s in &f.body {
        out.push_str("        ");
        out.push_str(&statement_str(s, st));
        out.push('\n');
    }
    let _ = writeln!(out, "    }} -> ({});", f.outputs.join(", "));
}

/// Prints one statement (without indentation or newline).
pub fn statement_str(s: &Statement, st: ScalarStyle) -> String {
    let args: Vec<String> = s
        .args
        .iter()
        .map(|(k, a)| format!("{k} = {}", arg_str(a, st)))
        .collect();
    let mut attrs: Vec<(String, String)> = s
        .attrs
        .iter()
        .map(|(k, v)| (k.clone(), value_str(v, st)))
        .collect();
    attrs.push((
        "name".into(),
        value_str(&Value::Scalar(Scalar::Str(s.label.clone())), st),
    ));
    attrs.sort();
    let attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    format!(
        "{} {} = {}({})[{}];",
        type_str(&s.ty),
        s.name,
        s.op,
        args.join(", "),
        attrs.join(", ")
    )
}

fn arg_str(a: &Arg, st: ScalarStyle) -> String {
    match a {
        Arg::Var(n) => n.clone(),
        Arg::Tuple(ns) => format!("({})", ns.join(", ")),
        Arg::Inline(v) => value_str(v, st),
    }
}

/// `tensor<fp16, [1, 4, 1, 2]>` or a scalar dtype name.
pub fn type_str(t: &ValueType) -> String {
    match t {
        ValueType::Scalar(d) => d.name().to_string(),
        ValueType::Tensor(t) => {
            let dims: Vec<String> = t.shape.iter().map(usize::to_string).collect();
            format!("tensor<{}, [{}]>", t.dtype, dims.join(", "))
        }
    }
}

/// Prints a literal value.
pub fn value_str(v: &Value, st: ScalarStyle) -> String {
    match v {
        Value::Scalar(s) => match st {
            ScalarStyle::Short => format!("{}({})", s.dtype(), scalar_lit(s)),
            ScalarStyle::RankZeroTensor => format!("tensor<{}, []>({})", s.dtype(), scalar_lit(s)),
        },
        Value::Tensor(t) => {
            let mut body = String::new();
            nested(&mut body, &t.ty.shape, &t.values);
            format!("{}({body})", type_str(&ValueType::Tensor(t.ty.clone())))
        }
        Value::Blob(b) => format!(
            "{}(BLOBFILE(path = {}, offset = {}))",
            type_str(&ValueType::Tensor(b.ty.clone())),
            value_str(&Value::Scalar(Scalar::Str(b.path.clone())), st),
            value_str(
                &Value::Scalar(Scalar::Int(DType::UInt64, b.offset.into())),
                st
            ),
        ),
    }
}

fn nested(out: &mut String, shape: &[usize], values: &[Scalar]) {
    out.push('[');
    if shape.len() <= 1 {
        let items: Vec<String> = values.iter().map(scalar_lit).collect();
        out.push_str(&items.join(", "));
    } else {
        let inner: usize = shape[1..].iter().product();
        for (i, chunk) in values.chunks(inner.max(1)).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            nested(out, &shape[1..], chunk);
        }
    }
    out.push(']');
}

/// The literal text of a scalar without its type wrapper.
pub fn scalar_lit(s: &Scalar) -> String {
    match s {
        Scalar::Bool(b) => b.to_string(),
        Scalar::Int(_, v) => v.to_string(),
        Scalar::Float(d, v) => format_float(*d, *v),
        Scalar::Str(s) => quote(s),
    }
}

fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Shortest plain-decimal spelling of `v` that parses back to the same value
/// after rounding to `dtype` (fp16, fp32 or fp64). Always contains a `.`.
pub fn format_float(dtype: DType, v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let target = crate::ir::round_to(dtype, v);
    let mut sci = format!("{target:e}");
    for digits in 1..=17usize {
        let s = format!("{:.*e}", digits - 1, target);
        if s.parse::<f64>()
            .is_ok_and(|p| crate::ir::round_to(dtype, p).to_bits() == target.to_bits())
        {
            sci = s;
            break;
        }
    }
    sci_to_plain(&sci)
}

/// Turns Rust's `d.ddde±x` into plain positional notation.
fn sci_to_plain(sci: &str) -> String {
    let (mant, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let point = exp + 1; // digits before the decimal point
    let n = digits.len() as i64;
    let mut s = if point <= 0 {
        format!(
            "0.{}{}",
            "0".repeat(usize::try_from(-point).unwrap_or(0)),
            digits
        )
    } else if point >= n {
        format!(
            "{}{}.0",
            digits,
            "0".repeat(usize::try_from(point - n).unwrap_or(0))
        )
    } else {
        let p = usize::try_from(point).unwrap_or(0);
        format!("{}.{}", &digits[..p], &digits[p..])
    };
    if s.contains('.') {
        while s.ends_with('0') && !s.ends_with(".0") {
            s.pop();
        }
    }
    if neg {
        s.insert(0, '-');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats() {
        assert_eq!(format_float(DType::Fp16, 0.5), "0.5");
        assert_eq!(format_float(DType::Fp16, -0.5), "-0.5");
        assert_eq!(format_float(DType::Fp16, 1.0), "1.0");
        assert_eq!(format_float(DType::Fp16, -65504.0), "-65500.0");
        assert_eq!(format_float(DType::Fp32, -65504.0), "-65504.0");
        assert_eq!(format_float(DType::Fp16, 0.0), "0.0");
        assert_eq!(format_float(DType::Fp32, 0.00001), "0.00001");
        // 1e-6 is a subnormal in fp16; `%f` would print 0.000001 (ane-spec §2.1)
        let v = crate::ir::round_to(DType::Fp16, 1e-6);
        let s = format_float(DType::Fp16, v);
        let back = s
            .parse::<f64>()
            .map(|p| crate::ir::round_to(DType::Fp16, p));
        assert_eq!(back, Ok(v), "{s}");
        // random fp32 bit patterns round-trip through print + parse
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..100_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = f32::from_bits((state >> 32) as u32);
            if !f.is_finite() {
                continue;
            }
            let s = format_float(DType::Fp32, f64::from(f));
            let p: f64 = s.parse().unwrap_or(f64::NAN);
            assert_eq!((p as f32).to_bits(), f.to_bits(), "{s}");
        }
        // every finite fp16 round-trips
        for bits in 0u16..=u16::MAX {
            let h = half::f16::from_bits(bits);
            if !h.is_finite() {
                continue;
            }
            let s = format_float(DType::Fp16, h.to_f64());
            let p: f64 = s.parse().unwrap_or(f64::NAN);
            assert_eq!(half::f16::from_f64(p).to_bits(), bits, "{s}");
            assert!(!s.contains('e'));
        }
    }
}
