//! Tokenizer for MIL text: identifiers, numbers, strings and punctuation; whitespace is insignificant.

use crate::error::{Error, Result};

/// A token kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident(String),
    /// A numeric literal, kept as written (decimal int, decimal float, hex float).
    Number(String),
    /// A double-quoted string, escapes resolved.
    Str(String),
    /// One of `( ) [ ] { } < > , = ;`.
    Punct(char),
    /// `->`.
    Arrow,
    /// End of input.
    Eof,
}

/// A token with its 1-based position.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: usize,
    pub col: usize,
}

/// Longest input accepted, to bound work on hostile input (64 MiB).
pub(crate) const MAX_SOURCE_BYTES: usize = 64 << 20;

pub(crate) fn tokenize(src: &str) -> Result<Vec<Token>> {
    if src.len() > MAX_SOURCE_BYTES {
        return Err(Error::Parse {
            line: 1,
            col: 1,
            msg: format!("source is {} bytes, limit {MAX_SOURCE_BYTES}", src.len()),
        });
    }
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let err = |line, col, msg: String| Error::Parse { line, col, msg };
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            col += 1;
            continue;
        }
        let start = i;
        let tok = if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            Tok::Ident(chars[start..i].iter().collect())
        } else if c.is_ascii_digit()
            || ((c == '-' || c == '+' || c == '.')
                && chars
                    .get(i + 1)
                    .is_some_and(|n| n.is_ascii_digit() || *n == '.'))
        {
            i += 1;
            let hex = c == '0' && matches!(chars.get(i), Some('x' | 'X'))
                || (matches!(c, '-' | '+')
                    && chars.get(i) == Some(&'0')
                    && matches!(chars.get(i + 1), Some('x' | 'X')));
            while i < chars.len() {
                let d = chars[i];
                let prev = chars[i - 1];
                let exp_sign = matches!(d, '-' | '+')
                    && if hex {
                        matches!(prev, 'p' | 'P')
                    } else {
                        matches!(prev, 'e' | 'E')
                    };
                if d.is_ascii_alphanumeric() || d == '.' || exp_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            Tok::Number(chars[start..i].iter().collect())
        } else if c == '"' {
            i += 1;
            let mut s = String::new();
            loop {
                match chars.get(i) {
                    None | Some('\n') => {
                        return Err(err(tl, tc, "unterminated string literal".into()))
                    }
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        match chars.get(i + 1) {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(&e @ ('"' | '\\')) => s.push(e),
                            _ => return Err(err(line, col, "bad escape in string".into())),
                        }
                        i += 2;
                    }
                    Some(&ch) => {
                        s.push(ch);
                        i += 1;
                    }
                }
            }
            Tok::Str(s)
        } else if c == '-' && chars.get(i + 1) == Some(&'>') {
            i += 2;
            Tok::Arrow
        } else if "()[]{}<>,=;".contains(c) {
            i += 1;
            Tok::Punct(c)
        } else {
            return Err(err(line, col, format!("unexpected character {c:?}")));
        };
        col += i - start;
        out.push(Token {
            tok,
            line: tl,
            col: tc,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}

/// Parses a decimal integer literal.
pub(crate) fn parse_int(text: &str) -> Option<i128> {
    let t = text.strip_prefix('+').unwrap_or(text);
    if t.is_empty()
        || !t
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    t.parse::<i128>().ok()
}

/// Parses a decimal or C99 hexadecimal float literal (`0x1p-3`).
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        parse_hex_float(h)?
    } else {
        if !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        {
            return None;
        }
        body.parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn parse_hex_float(h: &str) -> Option<f64> {
    let (mant, exp) = match h.find(['p', 'P']) {
        Some(p) => (&h[..p], h[p + 1..].parse::<i32>().ok()?),
        None => (h, 0),
    };
    let (int_part, frac_part) = match mant.find('.') {
        Some(p) => (&mant[..p], &mant[p + 1..]),
        None => (mant, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int_part.chars() {
        v = v * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac_part.chars() {
        v += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(v * 2f64.powi(exp.clamp(-2000, 2000)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_float("0x1p-3"), Some(0.125));
        assert_eq!(parse_float("-0x1.8p1"), Some(-3.0));
        assert_eq!(parse_float("0.00001"), Some(0.00001));
        assert_eq!(parse_float("-65504"), Some(-65504.0));
        assert_eq!(parse_int("-12"), Some(-12));
        assert_eq!(parse_int("1.0"), None);
        let toks = tokenize("x=fp16(-0.5)->(a)").unwrap_or_default();
        assert_eq!(toks[4].tok, Tok::Number("-0.5".into()));
        assert_eq!(toks[6].tok, Tok::Arrow);
        let toks = tokenize("offset=uint64(64)").unwrap_or_default();
        assert_eq!(toks[4].tok, Tok::Number("64".into()));
        let toks = tokenize("1e-5 0x1p-3").unwrap_or_default();
        assert_eq!(toks[0].tok, Tok::Number("1e-5".into()));
        assert_eq!(toks[1].tok, Tok::Number("0x1p-3".into()));
    }
}
