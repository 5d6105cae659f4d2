//! LFM2's calls: a Python list of calls with keyword arguments,
//! `[get_weather(city="Oslo", days=3), add(a=1, b=2)]` (the brackets may be
//! missing for one call). Values are Python literals (strings in either
//! quote, numbers, True/False/None, lists, dicts) or their JSON spellings.

use super::ParsedCall;
use serde_json::{Map, Number, Value};

/// The calls in `text`, or `None` when it is not such a list.
pub fn parse_calls(text: &str) -> Option<Vec<ParsedCall>> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        depth: 0,
    };
    p.ws();
    let bracketed = p.eat(b'[');
    let mut calls = Vec::new();
    loop {
        p.ws();
        if bracketed && p.eat(b']') {
            break;
        }
        calls.push(p.call()?);
        p.ws();
        if p.eat(b',') {
            continue;
        }
        if bracketed {
            p.ws();
            if !p.eat(b']') {
                return None;
            }
        }
        break;
    }
    p.ws();
    (p.i == p.s.len() && !calls.is_empty()).then_some(calls)
}

/// Nesting deeper than this is refused (no unbounded recursion on input).
const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn ident(&mut self) -> Option<String> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
        {
            self.i += 1;
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    fn call(&mut self) -> Option<ParsedCall> {
        let name = self.ident()?;
        self.ws();
        if !self.eat(b'(') {
            return None;
        }
        let mut args = Map::new();
        loop {
            self.ws();
            if self.eat(b')') {
                break;
            }
            let key = self.ident()?;
            self.ws();
            if !self.eat(b'=') {
                return None;
            }
            self.ws();
            let v = self.value()?;
            args.insert(key, v);
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat(b')') {
                break;
            }
            return None;
        }
        Some(ParsedCall {
            name,
            arguments: Value::Object(args),
        })
    }

    fn value(&mut self) -> Option<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let v = match self.peek()? {
            b'"' | b'\'' => self.string().map(Value::String),
            b'[' => self.list(),
            b'{' => self.dict(),
            b'-' | b'+' | b'0'..=b'9' => self.number(),
            _ => match self.ident()?.as_str() {
                "True" | "true" => Some(Value::Bool(true)),
                "False" | "false" => Some(Value::Bool(false)),
                "None" | "null" => Some(Value::Null),
                _ => None,
            },
        };
        self.depth -= 1;
        v
    }

    fn string(&mut self) -> Option<String> {
        let quote = self.peek()?;
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                _ if c == quote => break,
                b'\\' => {
                    let e = self.peek()?;
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'u' => {
                            let hex = self.s.get(self.i..self.i + 4)?;
                            let code =
                                u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                            self.i += 4;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(
                                char::from_u32(code)?.encode_utf8(&mut buf).as_bytes(),
                            );
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
        String::from_utf8(out).ok()
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'))
        {
            self.i += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        if let Ok(n) = text.parse::<i64>() {
            return Some(Value::Number(n.into()));
        }
        let f: f64 = text.parse().ok()?;
        Number::from_f64(f).map(Value::Number)
    }

    fn list(&mut self) -> Option<Value> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.eat(b']') {
                return Some(Value::Array(items));
            }
            items.push(self.value()?);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                return self.eat(b']').then_some(Value::Array(items));
            }
        }
    }

    fn dict(&mut self) -> Option<Value> {
        self.i += 1;
        let mut map = Map::new();
        loop {
            self.ws();
            if self.eat(b'}') {
                return Some(Value::Object(map));
            }
            let key = match self.value()? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            self.ws();
            if !self.eat(b':') {
                return None;
            }
            self.ws();
            let v = self.value()?;
            map.insert(key, v);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                return self.eat(b'}').then_some(Value::Object(map));
            }
        }
    }
}
