//! Parser for both MIL text dialects (`program(1.3)`/`ios18` and `program(1.0)`/coremltools).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::ir::{
    round_to, Arg, BlobRef, DType, Function, Program, Scalar, ScalarStyle, Statement, TensorLit,
    TensorType, Value, ValueType,
};
use crate::lex::{parse_float, parse_int, tokenize, Tok, Token};

/// Largest rank accepted by the parser (the ANE limit is lower: rule `ANE-RANK`).
pub const MAX_PARSE_RANK: usize = 16;
/// Largest element count of an inline tensor literal accepted by the parser.
pub const MAX_INLINE_ELEMENTS: usize = 1 << 20;
/// Deepest nesting of list literals accepted.
const MAX_NESTING: usize = 32;

/// Parses MIL program text. Whitespace between tokens is insignificant; both
/// scalar spellings (`string("x")` and `tensor<string, []>("x")`) are accepted.
pub fn parse(src: &str) -> Result<Program> {
    let toks = tokenize(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        legacy: false,
    };
    p.program()
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    legacy: bool,
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.peek_at(0)
    }

    fn peek_at(&self, k: usize) -> &Tok {
        let i = (self.pos + k).min(self.toks.len() - 1);
        &self.toks[i].tok
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T> {
        let t = &self.toks[self.pos.min(self.toks.len() - 1)];
        Err(Error::Parse {
            line: t.line,
            col: t.col,
            msg: format!("{} (found {:?})", msg.into(), t.tok),
        })
    }

    fn punct(&mut self, c: char) -> Result<()> {
        if *self.peek() == Tok::Punct(c) {
            self.next();
            Ok(())
        } else {
            self.err(format!("expected `{c}`"))
        }
    }

    fn eat(&mut self, c: char) -> bool {
        if *self.peek() == Tok::Punct(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Result<String> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.next();
                Ok(s)
            }
            _ => self.err("expected identifier"),
        }
    }

    fn keyword(&mut self, kw: &str) -> Result<()> {
        match self.peek() {
            Tok::Ident(s) if s == kw => {
                self.next();
                Ok(())
            }
            _ => self.err(format!("expected `{kw}`")),
        }
    }

    fn program(&mut self) -> Result<Program> {
        self.keyword("program")?;
        self.punct('(')?;
        let version = match self.next() {
            Tok::Number(n) => n,
            _ => return self.err("expected program version"),
        };
        self.punct(')')?;
        let mut build_info = Vec::new();
        if self.eat('[') {
            while !self.eat(']') {
                let key = self.ident()?;
                self.punct('=')?;
                if key == "buildInfo" {
                    build_info = self.build_info()?;
                } else {
                    self.value()?;
                }
                if !self.eat(',') && *self.peek() != Tok::Punct(']') {
                    return self.err("expected `,` or `]` in program attributes");
                }
            }
        }
        self.punct('{')?;
        let mut functions = Vec::new();
        while !self.eat('}') {
            functions.push(self.function()?);
        }
        if *self.peek() != Tok::Eof {
            return self.err("trailing input after program");
        }
        Ok(Program {
            version,
            build_info,
            scalar_style: if self.legacy {
                ScalarStyle::RankZeroTensor
            } else {
                ScalarStyle::Short
            },
            functions,
        })
    }

    fn build_info(&mut self) -> Result<Vec<(String, String)>> {
        self.keyword("dict")?;
        self.punct('<')?;
        let k = self.ty()?;
        self.punct(',')?;
        self.ty()?;
        self.punct('>')?;
        if matches!(k, ValueType::Tensor(_)) {
            self.legacy = true;
        }
        self.punct('(')?;
        self.punct('{')?;
        let mut out = Vec::new();
        while !self.eat('}') {
            self.punct('{')?;
            let key = self.string_value()?;
            self.punct(',')?;
            let val = self.string_value()?;
            self.punct('}')?;
            out.push((key, val));
            if !self.eat(',') && *self.peek() != Tok::Punct('}') {
                return self.err("expected `,` or `}` in buildInfo");
            }
        }
        self.punct(')')?;
        Ok(out)
    }

    fn string_value(&mut self) -> Result<String> {
        if let Tok::Str(s) = self.peek().clone() {
            self.next();
            return Ok(s);
        }
        match self.value()? {
            Value::Scalar(Scalar::Str(s)) => Ok(s),
            _ => self.err("expected a string"),
        }
    }

    fn function(&mut self) -> Result<Function> {
        self.keyword("func")?;
        let name = self.ident()?;
        self.punct('<')?;
        let opset = self.ident()?;
        self.punct('>')?;
        self.punct('(')?;
        let mut inputs = Vec::new();
        while !self.eat(')') {
            let ty = match self.ty()? {
                ValueType::Tensor(t) => t,
                ValueType::Scalar(_) => return self.err("function inputs must be tensors"),
            };
            inputs.push((self.ident()?, ty));
            if !self.eat(',') && *self.peek() != Tok::Punct(')') {
                return self.err("expected `,` or `)` after function input");
            }
        }
        self.punct('{')?;
        let mut body = Vec::new();
        while !self.eat('}') {
            body.push(self.statement()?);
        }
        if *self.peek() != Tok::Arrow {
            return self.err("expected `->`");
        }
        self.next();
        self.punct('(')?;
        let outputs = self.name_list(')')?;
        self.eat(';');
        Ok(Function {
            name,
            opset,
            inputs,
            body,
            outputs,
        })
    }

    /// Comma-separated identifiers up to and including `close`.
    fn name_list(&mut self, close: char) -> Result<Vec<String>> {
        let mut out = Vec::new();
        while !self.eat(close) {
            out.push(self.ident()?);
            if !self.eat(',') && *self.peek() != Tok::Punct(close) {
                return self.err(format!("expected `,` or `{close}`"));
            }
        }
        Ok(out)
    }

    fn statement(&mut self) -> Result<Statement> {
        let ty = self.ty()?;
        let name = self.ident()?;
        self.punct('=')?;
        let op = self.ident()?;
        self.punct('(')?;
        let mut args = BTreeMap::new();
        while !self.eat(')') {
            let key = self.ident()?;
            self.punct('=')?;
            let arg = self.arg()?;
            if args.insert(key.clone(), arg).is_some() {
                return self.err(format!("duplicate argument `{key}`"));
            }
            if !self.eat(',') && *self.peek() != Tok::Punct(')') {
                return self.err("expected `,` or `)` after argument");
            }
        }
        let mut label = None;
        let mut attrs = BTreeMap::new();
        if self.eat('[') {
            while !self.eat(']') {
                let key = self.ident()?;
                self.punct('=')?;
                let v = self.value()?;
                if key == "name" {
                    match v {
                        Value::Scalar(Scalar::Str(s)) => label = Some(s),
                        _ => return self.err("`name` attribute must be a string"),
                    }
                } else if attrs.insert(key.clone(), v).is_some() {
                    return self.err(format!("duplicate attribute `{key}`"));
                }
                if !self.eat(',') && *self.peek() != Tok::Punct(']') {
                    return self.err("expected `,` or `]` after attribute");
                }
            }
        }
        self.punct(';')?;
        Ok(Statement {
            ty,
            label: label.unwrap_or_else(|| name.clone()),
            name,
            op,
            args,
            attrs,
        })
    }

    fn arg(&mut self) -> Result<Arg> {
        match self.peek().clone() {
            Tok::Punct('(') => {
                self.next();
                Ok(Arg::Tuple(self.name_list(')')?))
            }
            Tok::Ident(s) => {
                let typed = s == "tensor" || DType::from_name(&s).is_some();
                let opens = matches!(self.peek_at(1), Tok::Punct('(') | Tok::Punct('<'));
                if (typed && opens) || s == "true" || s == "false" {
                    Ok(Arg::Inline(self.value()?))
                } else {
                    self.next();
                    Ok(Arg::Var(s))
                }
            }
            _ => Ok(Arg::Inline(self.value()?)),
        }
    }

    fn ty(&mut self) -> Result<ValueType> {
        let name = self.ident()?;
        if name == "tensor" {
            self.punct('<')?;
            let dt = self.ident()?;
            let dtype = DType::from_name(&dt).map_or_else(|| self.err("unknown dtype"), Ok)?;
            self.punct(',')?;
            self.punct('[')?;
            let mut shape = Vec::new();
            while !self.eat(']') {
                let d = match self.next() {
                    Tok::Number(n) => parse_int(&n),
                    _ => None,
                };
                match d.and_then(|d| usize::try_from(d).ok()) {
                    Some(d) if d > 0 => shape.push(d),
                    _ => return self.err("expected a positive static dimension"),
                }
                if shape.len() > MAX_PARSE_RANK {
                    return self.err(format!("rank above {MAX_PARSE_RANK}"));
                }
                if !self.eat(',') && *self.peek() != Tok::Punct(']') {
                    return self.err("expected `,` or `]` in shape");
                }
            }
            self.punct('>')?;
            Ok(ValueType::Tensor(TensorType { dtype, shape }))
        } else {
            match DType::from_name(&name) {
                Some(d) => Ok(ValueType::Scalar(d)),
                None => self.err(format!("unknown type `{name}`")),
            }
        }
    }

    /// A literal value: `dtype(lit)`, `tensor<..>(...)` or a bare literal.
    fn value(&mut self) -> Result<Value> {
        match self.peek().clone() {
            Tok::Ident(s) if s == "tensor" => {
                let ty = match self.ty()? {
                    ValueType::Tensor(t) => t,
                    ValueType::Scalar(_) => return self.err("expected tensor type"),
                };
                self.punct('(')?;
                let v = if *self.peek() == Tok::Ident("BLOBFILE".into()) {
                    self.blobfile(ty)?
                } else if ty.shape.is_empty() {
                    self.legacy = true;
                    Value::Scalar(self.scalar_lit(ty.dtype)?)
                } else {
                    let n = ty.numel();
                    if n > MAX_INLINE_ELEMENTS {
                        return self.err("inline tensor literal too large");
                    }
                    let mut values = Vec::with_capacity(n);
                    self.list(&ty.shape, ty.dtype, 0, &mut values)?;
                    Value::Tensor(TensorLit { ty, values })
                };
                self.punct(')')?;
                Ok(v)
            }
            Tok::Ident(s) if DType::from_name(&s).is_some() => {
                self.next();
                let dt = DType::from_name(&s).map_or_else(|| self.err("dtype"), Ok)?;
                self.punct('(')?;
                let v = self.scalar_lit(dt)?;
                self.punct(')')?;
                Ok(Value::Scalar(v))
            }
            Tok::Ident(s) if s == "true" || s == "false" => {
                self.next();
                Ok(Value::Scalar(Scalar::Bool(s == "true")))
            }
            Tok::Str(s) => {
                self.next();
                Ok(Value::Scalar(Scalar::Str(s)))
            }
            Tok::Number(n) => {
                let dt = if parse_int(&n).is_some() {
                    DType::Int32
                } else {
                    DType::Fp32
                };
                Ok(Value::Scalar(self.scalar_lit(dt)?))
            }
            _ => self.err("expected a literal value"),
        }
    }

    fn blobfile(&mut self, ty: TensorType) -> Result<Value> {
        self.keyword("BLOBFILE")?;
        self.punct('(')?;
        let (mut path, mut offset) = (None, None);
        while !self.eat(')') {
            let key = self.ident()?;
            self.punct('=')?;
            match (key.as_str(), self.value()?) {
                ("path", Value::Scalar(Scalar::Str(s))) => path = Some(s),
                ("offset", Value::Scalar(Scalar::Int(_, v))) => {
                    offset = Some(u64::try_from(v).map_or_else(|_| self.err("bad offset"), Ok)?)
                }
                _ => return self.err(format!("unexpected BLOBFILE field `{key}`")),
            }
            if !self.eat(',') && *self.peek() != Tok::Punct(')') {
                return self.err("expected `,` or `)` in BLOBFILE");
            }
        }
        match (path, offset) {
            (Some(path), Some(offset)) => Ok(Value::Blob(BlobRef { ty, path, offset })),
            _ => self.err("BLOBFILE needs `path` and `offset`"),
        }
    }

    fn list(
        &mut self,
        shape: &[usize],
        dt: DType,
        depth: usize,
        out: &mut Vec<Scalar>,
    ) -> Result<()> {
        if depth > MAX_NESTING {
            return self.err("list nesting too deep");
        }
        self.punct('[')?;
        let mut count = 0usize;
        while !self.eat(']') {
            if depth + 1 < shape.len() {
                self.list(shape, dt, depth + 1, out)?;
            } else {
                out.push(self.scalar_lit(dt)?);
            }
            count += 1;
            if !self.eat(',') && *self.peek() != Tok::Punct(']') {
                return self.err("expected `,` or `]` in list");
            }
        }
        if shape.get(depth) != Some(&count) {
            return self.err(format!(
                "list at depth {depth} has {count} elements, shape says {:?}",
                shape.get(depth)
            ));
        }
        Ok(())
    }

    fn scalar_lit(&mut self, dt: DType) -> Result<Scalar> {
        let t = self.next();
        match (dt, &t) {
            (DType::Bool, Tok::Ident(s)) if s == "true" || s == "false" => {
                Ok(Scalar::Bool(s == "true"))
            }
            (DType::String, Tok::Str(s)) => Ok(Scalar::Str(s.clone())),
            (d, Tok::Number(n)) if d.is_int() => {
                let v = parse_int(n);
                match (v, d.int_range()) {
                    (Some(v), Some((lo, hi))) if v >= lo && v <= hi => Ok(Scalar::Int(d, v)),
                    _ => self.err_prev(format!("`{n}` is not a valid {d}")),
                }
            }
            (d, Tok::Number(n)) if d.is_float() => match parse_float(n) {
                Some(v) => Ok(Scalar::Float(d, round_to(d, v))),
                None => self.err_prev(format!("`{n}` is not a valid {d}")),
            },
            (d, Tok::Ident(s)) if d.is_float() && (s == "inf" || s == "nan") => Ok(Scalar::Float(
                d,
                if s == "inf" { f64::INFINITY } else { f64::NAN },
            )),
            _ => self.err_prev(format!("expected a {dt} literal")),
        }
    }

    fn err_prev<T>(&self, msg: String) -> Result<T> {
        let t = &self.toks[self.pos.saturating_sub(1)];
        Err(Error::Parse {
            line: t.line,
            col: t.col,
            msg,
        })
    }
}
