#!/usr/bin/env python3
"""Checks that every MIL program `anedvd kernels --emit DIR` wrote is valid by
coremltools' own op definitions (Apple's MIL op set, iOS18 opset).

For each DIR (holding index.json and DIR/<kernel>/model.mil plus the kernel's
weight files), every program is parsed here (a small parser for the MIL text
dialect crates/mil/src/print.rs writes) and rebuilt, statement by statement,
with coremltools' MIL builder in a function of the opset the program names
(ios18). So:

* an op name that is not a MIL op of that opset is rejected;
* an argument name the op does not define, a missing required argument, an
  argument of a type outside the op's type domain, or a non-const value where
  the op wants a const, is rejected by the op's own input spec;
* coremltools' type inference gives each statement's output type, which must
  equal the type our MIL text declares (dtype and shape), and likewise for the
  function outputs;
* BLOBFILE consts are read with coremltools' blob-storage reader
  (`libmilstoragepython._BlobStorageReader`) at the MIL offset with the dtype
  the MIL declares: a missing file, an offset that is not a blob, a dtype or
  element-count mismatch or a truncated file is an error; sub-byte payloads
  (uint4/uint6 palette indices, packed as coremltools' writer packs them)
  come back unpacked and typed with coremltools' `types.np_uint4_dtype`, ...;
* compressed weights (`constexpr_affine_dequantize`, `constexpr_lut_to_dense`)
  are rebuilt with their operands (BLOBFILE or literal) read from the
  attribute list or the argument list, exactly as coremltools' MIL loader
  reads const/constexpr_* ops, so the op's own checks (scale length against
  the axis, palette count 2^bits of the index dtype, palette groups dividing
  the indices, ...) and type inference apply; attribute operands on any other
  op are rejected (the loader allows only `name` there). Where the operands
  sit elsewhere than coremltools' writer would put them (it writes iOS16
  constexpr ops' operands as attributes, iOS18 ones' as inputs), the program
  is accepted and a note is printed;
* the finished program goes through coremltools' program checks (opset
  compatibility, `Program.validate`, rank <= 5, const inputs, core ops only).

It does not show that Apple's ANE compiler accepts a program, nor anything
about hardware behaviour (docs/mil-validity.md).

Usage:
    check-mil-coremltools.py DIR [DIR ...]
    check-mil-coremltools.py --self-test DIR [COMPRESSED_DIR ...]

--self-test runs its fp16 mutations on the first DIR and its int8/lut
mutations on every DIR holding constexpr_affine_dequantize /
constexpr_lut_to_dense programs (each DIR after the first must hold one).

Prints one line per program and `N passed, M failed`; exits 1 on any
failure, and also when no program was found.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

# libcoremlpython (the macOS model runner) is absent off macOS; the MIL builder
# and the blob reader do not need it, so its import warnings are silenced.
logging.disable(logging.WARNING)

import numpy as np  # noqa: E402
import coremltools as ct  # noqa: E402
import coremltools.converters.mil.mil.ops.defs  # noqa: E402,F401  (registers every op)
from coremltools import libmilstoragepython  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import Function, Program, types  # noqa: E402
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry  # noqa: E402

logging.disable(logging.NOTSET)

PINNED_COREMLTOOLS = "9.0"
MODEL_PATH_PREFIX = "@model_path/"

# MIL opset names of `func main<ios18>` and the coremltools targets they mean.
OPSETS = {
    "ios15": ct.target.iOS15,
    "ios16": ct.target.iOS16,
    "ios17": ct.target.iOS17,
    "ios18": ct.target.iOS18,
}
# The opset every program we emit must name.
EXPECTED_OPSET = "ios18"

# Scalar / element dtypes of the dialect (crates/mil/src/ir.rs DType) and the
# numpy types their literals become.
NUMPY_DTYPES = {
    "fp16": np.float16,
    "fp32": np.float32,
    "fp64": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
}
INT_DTYPES = {d for d in NUMPY_DTYPES if d.startswith(("int", "uint"))}
FLOAT_DTYPES = {"fp16", "fp32", "fp64"}
# Sub-byte dtypes: only as BLOBFILE payloads (constexpr_lut_to_dense indices),
# packed in the blob, unpacked by coremltools' reader to one value per byte
# and typed with coremltools' own numpy dtypes (`types.np_uint4_dtype`, ...).
SUB_BYTE_DTYPES = {
    "uint1": types.uint1,
    "uint2": types.uint2,
    "uint3": types.uint3,
    "uint4": types.uint4,
    "uint6": types.uint6,
    "int4": types.int4,
}
ALL_DTYPES = set(NUMPY_DTYPES) | set(SUB_BYTE_DTYPES) | {"string"}

# Blob-reader method and the numpy view of what it returns, per MIL dtype
# (the sub-byte ones: coremltools' numpy dtype the unpacked values become).
BLOB_READERS = {
    "fp16": ("read_fp16_data", np.float16),
    "fp32": ("read_float_data", np.float32),
    "int8": ("read_int8_data", np.int8),
    "uint8": ("read_uint8_data", np.uint8),
    "int16": ("read_int16_data", np.int16),
    "uint16": ("read_uint16_data", np.uint16),
    "int32": ("read_int32_data", np.int32),
    "uint32": ("read_uint32_data", np.uint32),
}
BLOB_READERS.update(
    {name: (f"read_{name}_data", types.nptype_from_builtin(t)) for name, t in SUB_BYTE_DTYPES.items()}
)


class MilSyntaxError(Exception):
    """Our MIL text does not follow the dialect's grammar."""


class CheckError(Exception):
    """A program is invalid; the message names the statement and op."""


# --------------------------------------------------------------------------
# Parsed program
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorType:
    """`tensor<dtype, [d0, d1, ...]>`."""

    dtype: str
    shape: Tuple[int, ...]

    def __str__(self) -> str:
        return f"tensor<{self.dtype}, [{', '.join(map(str, self.shape))}]>"


@dataclass(frozen=True)
class ScalarType:
    """A scalar type such as `int32` or `string`."""

    dtype: str

    def __str__(self) -> str:
        return self.dtype


ValueType = Union[TensorType, ScalarType]


@dataclass
class Scalar:
    """A scalar literal: `fp16(0.5)`, `string("x")`, `bool(true)`."""

    dtype: str
    value: object


@dataclass
class TensorLiteral:
    """An inline tensor literal, values in row-major order."""

    ty: TensorType
    values: List[object]


@dataclass
class BlobRef:
    """`tensor<..>(BLOBFILE(path = string(".."), offset = uint64(N)))`."""

    ty: TensorType
    path: str
    offset: int


Value = Union[Scalar, TensorLiteral, BlobRef]


@dataclass
class VarArg:
    """An argument naming an SSA value."""

    name: str


@dataclass
class TupleArg:
    """An argument naming a tuple of SSA values: `values = (a, b)`."""

    names: List[str]


@dataclass
class InlineArg:
    """An argument given as a literal value."""

    value: Value


Arg = Union[VarArg, TupleArg, InlineArg]


@dataclass
class Statement:
    """`<type> <name> = <op>(<args>)[<attrs>];`, with its 1-based line."""

    ty: ValueType
    name: str
    op: str
    args: Dict[str, Arg]
    attrs: Dict[str, Value]
    label: str
    line: int


@dataclass
class MilFunction:
    """`func <name><<opset>>(<inputs>) { <body> } -> (<outputs>);`."""

    name: str
    opset: str
    inputs: List[Tuple[str, TensorType]]
    body: List[Statement]
    outputs: List[str]


@dataclass
class MilProgram:
    """`program(<version>) [buildInfo = ...] { <functions> }`."""

    version: str
    build_info: Dict[str, str]
    functions: List[MilFunction] = field(default_factory=list)


# --------------------------------------------------------------------------
# Tokenizer and parser (the grammar of crates/mil/src/lex.rs and parse.rs)
# --------------------------------------------------------------------------

TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<arrow>->)
  | (?P<number>[-+]?(?:0[xX][0-9A-Fa-f]*(?:\.[0-9A-Fa-f]*)?(?:[pP][-+]?[0-9]+)?
                      |[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?
                      |\.[0-9]+(?:[eE][-+]?[0-9]+)?))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"(?:[^"\\\n]|\\[nt"\\])*")
  | (?P<punct>[()\[\]{}<>,=;])
    """,
    re.VERBOSE,
)


@dataclass
class Token:
    """One token: kind (`number`, `ident`, `string`, `punct`, `arrow`, `eof`),
    its text (strings unescaped) and its 1-based line."""

    kind: str
    text: str
    line: int


def tokenize(src: str) -> List[Token]:
    """Splits MIL text into tokens; whitespace is insignificant."""
    tokens: List[Token] = []
    pos, line = 0, 1
    while pos < len(src):
        m = TOKEN_RE.match(src, pos)
        if m is None:
            raise MilSyntaxError(f"line {line}: unexpected character {src[pos]!r}")
        kind = m.lastgroup or ""
        text = m.group()
        if kind == "string":
            text = re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), text[1:-1])
        if kind != "ws":
            tokens.append(Token(kind, text, line))
        line += m.group().count("\n")
        pos = m.end()
    tokens.append(Token("eof", "", line))
    return tokens


def parse_int_literal(text: str) -> Optional[int]:
    """A decimal integer literal, or None."""
    return int(text) if re.fullmatch(r"[-+]?[0-9]+", text) else None


def parse_float_literal(text: str) -> float:
    """A decimal or C99 hexadecimal float literal (`0x1p-3`)."""
    body = text.lstrip("+-")
    sign = -1.0 if text.startswith("-") else 1.0
    if body[:2].lower() == "0x":
        return sign * float.fromhex(body)
    return sign * float(body)


class Parser:
    """Recursive-descent parser over the tokens of one program."""

    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.pos = 0

    # -- token helpers -----------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        """The token k ahead of the cursor (eof at the end)."""
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def next(self) -> Token:
        """Consumes and returns the current token."""
        tok = self.peek()
        self.pos = min(self.pos + 1, len(self.toks) - 1)
        return tok

    def fail(self, msg: str) -> MilSyntaxError:
        """A syntax error at the current token."""
        tok = self.peek()
        return MilSyntaxError(f"line {tok.line}: {msg} (found {tok.kind} {tok.text!r})")

    def is_punct(self, c: str, k: int = 0) -> bool:
        """True if the token k ahead is punctuation `c`."""
        tok = self.peek(k)
        return tok.kind == "punct" and tok.text == c

    def punct(self, c: str) -> None:
        """Consumes punctuation `c` or fails."""
        if not self.is_punct(c):
            raise self.fail(f"expected `{c}`")
        self.next()

    def eat(self, c: str) -> bool:
        """Consumes punctuation `c` if it is next."""
        if self.is_punct(c):
            self.next()
            return True
        return False

    def ident(self) -> str:
        """Consumes an identifier."""
        if self.peek().kind != "ident":
            raise self.fail("expected an identifier")
        return self.next().text

    def keyword(self, kw: str) -> None:
        """Consumes the identifier `kw` or fails."""
        if self.peek().kind != "ident" or self.peek().text != kw:
            raise self.fail(f"expected `{kw}`")
        self.next()

    def separator(self, close: str, what: str) -> None:
        """After a list item: a `,` or (not consumed) the closing `close`."""
        if not self.eat(",") and not self.is_punct(close):
            raise self.fail(f"expected `,` or `{close}` in {what}")

    # -- program structure -------------------------------------------------

    def program(self) -> MilProgram:
        """`program(V) [attrs] { functions }` then end of input."""
        self.keyword("program")
        self.punct("(")
        if self.peek().kind != "number":
            raise self.fail("expected the program version")
        prog = MilProgram(version=self.next().text, build_info={})
        self.punct(")")
        if self.eat("["):
            while not self.eat("]"):
                key = self.ident()
                self.punct("=")
                if key != "buildInfo":
                    raise self.fail(f"unknown program attribute `{key}`")
                prog.build_info = self.build_info()
                self.separator("]", "program attributes")
        self.punct("{")
        while not self.eat("}"):
            prog.functions.append(self.function())
        if self.peek().kind != "eof":
            raise self.fail("trailing input after the program")
        return prog

    def build_info(self) -> Dict[str, str]:
        """`dict<string, string>({{"k", "v"}, ...})`."""
        self.keyword("dict")
        self.punct("<")
        for i in range(2):
            if self.ty() != ScalarType("string"):
                raise self.fail("buildInfo must be dict<string, string>")
            if i == 0:
                self.punct(",")
        self.punct(">")
        self.punct("(")
        self.punct("{")
        out: Dict[str, str] = {}
        while not self.eat("}"):
            self.punct("{")
            key = self.string_literal()
            self.punct(",")
            out[key] = self.string_literal()
            self.punct("}")
            self.separator("}", "buildInfo")
        self.punct(")")
        return out

    def string_literal(self) -> str:
        """A bare `"x"` string token."""
        if self.peek().kind != "string":
            raise self.fail("expected a string literal")
        return self.next().text

    def function(self) -> MilFunction:
        """One `func` with its body and output list."""
        self.keyword("func")
        name = self.ident()
        self.punct("<")
        opset = self.ident()
        self.punct(">")
        self.punct("(")
        inputs: List[Tuple[str, TensorType]] = []
        while not self.eat(")"):
            ty = self.ty()
            if not isinstance(ty, TensorType):
                raise self.fail("function inputs must be tensors")
            inputs.append((self.ident(), ty))
            self.separator(")", "function inputs")
        self.punct("{")
        body: List[Statement] = []
        while not self.eat("}"):
            body.append(self.statement())
        if self.peek().kind != "arrow":
            raise self.fail("expected `->`")
        self.next()
        self.punct("(")
        outputs = self.name_list(")")
        self.punct(";")
        return MilFunction(name, opset, inputs, body, outputs)

    def name_list(self, close: str) -> List[str]:
        """Comma-separated identifiers up to and including `close`."""
        names: List[str] = []
        while not self.eat(close):
            names.append(self.ident())
            self.separator(close, "name list")
        return names

    def statement(self) -> Statement:
        """`<type> <name> = <op>(<args>)[<attrs>];`."""
        line = self.peek().line
        ty = self.ty()
        name = self.ident()
        self.punct("=")
        op = self.ident()
        self.punct("(")
        args: Dict[str, Arg] = {}
        while not self.eat(")"):
            key = self.ident()
            self.punct("=")
            if key in args:
                raise self.fail(f"duplicate argument `{key}`")
            args[key] = self.arg()
            self.separator(")", "arguments")
        attrs: Dict[str, Value] = {}
        label: Optional[str] = None
        if self.eat("["):
            while not self.eat("]"):
                key = self.ident()
                self.punct("=")
                value = self.value()
                if key == "name":
                    if not (isinstance(value, Scalar) and value.dtype == "string"):
                        raise self.fail("`name` must be a string")
                    label = str(value.value)
                elif key in attrs:
                    raise self.fail(f"duplicate attribute `{key}`")
                else:
                    attrs[key] = value
                self.separator("]", "attributes")
        self.punct(";")
        if label is None:
            raise MilSyntaxError(f"line {line}: statement `{name}` has no name attribute")
        return Statement(ty, name, op, args, attrs, label, line)

    def arg(self) -> Arg:
        """An argument: an SSA name, a `(a, b)` tuple or a literal."""
        tok = self.peek()
        if self.is_punct("("):
            self.next()
            return TupleArg(self.name_list(")"))
        if tok.kind == "ident":
            typed = tok.text == "tensor" or tok.text in ALL_DTYPES
            if typed and (self.is_punct("(", 1) or self.is_punct("<", 1)):
                return InlineArg(self.value())
            self.next()
            return VarArg(tok.text)
        return InlineArg(self.value())

    # -- types and literals ------------------------------------------------

    def ty(self) -> ValueType:
        """`tensor<dtype, [dims]>` or a scalar dtype name."""
        name = self.ident()
        if name != "tensor":
            if name not in ALL_DTYPES:
                raise MilSyntaxError(f"line {self.peek().line}: unknown type `{name}`")
            return ScalarType(name)
        self.punct("<")
        dtype = self.ident()
        if dtype not in ALL_DTYPES:
            raise self.fail(f"unknown dtype `{dtype}`")
        self.punct(",")
        self.punct("[")
        dims: List[int] = []
        while not self.eat("]"):
            tok = self.next()
            dim = parse_int_literal(tok.text) if tok.kind == "number" else None
            if dim is None or dim <= 0:
                raise MilSyntaxError(f"line {tok.line}: expected a positive static dimension, found {tok.text!r}")
            dims.append(dim)
            self.separator("]", "shape")
        self.punct(">")
        return TensorType(dtype, tuple(dims))

    def value(self) -> Value:
        """A typed literal: `dtype(lit)`, `tensor<..>([..])` or a BLOBFILE."""
        tok = self.peek()
        if tok.kind == "ident" and tok.text == "tensor":
            ty = self.ty()
            assert isinstance(ty, TensorType)
            self.punct("(")
            if self.peek().kind == "ident" and self.peek().text == "BLOBFILE":
                value: Value = self.blobfile(ty)
            else:
                values: List[object] = []
                self.nested_list(ty, 0, values)
                value = TensorLiteral(ty, values)
            self.punct(")")
            return value
        if tok.kind == "ident" and tok.text in ALL_DTYPES:
            self.next()
            self.punct("(")
            scalar = Scalar(tok.text, self.scalar_literal(tok.text))
            self.punct(")")
            return scalar
        raise self.fail("expected a typed literal")

    def blobfile(self, ty: TensorType) -> BlobRef:
        """`BLOBFILE(path = string(".."), offset = uint64(N))`."""
        self.keyword("BLOBFILE")
        self.punct("(")
        fields: Dict[str, Scalar] = {}
        while not self.eat(")"):
            key = self.ident()
            self.punct("=")
            val = self.value()
            if key in fields or key not in ("path", "offset") or not isinstance(val, Scalar):
                raise self.fail(f"bad BLOBFILE field `{key}`")
            fields[key] = val
            self.separator(")", "BLOBFILE")
        path, offset = fields.get("path"), fields.get("offset")
        if path is None or offset is None or path.dtype != "string" or offset.dtype != "uint64":
            raise self.fail("BLOBFILE needs path = string(..) and offset = uint64(..)")
        return BlobRef(ty, str(path.value), int(offset.value))  # type: ignore[arg-type]

    def nested_list(self, ty: TensorType, depth: int, out: List[object]) -> None:
        """A nested `[...]` list whose lengths match the shape."""
        self.punct("[")
        count = 0
        while not self.eat("]"):
            if depth + 1 < len(ty.shape):
                self.nested_list(ty, depth + 1, out)
            else:
                out.append(self.scalar_literal(ty.dtype))
            count += 1
            self.separator("]", "tensor literal")
        expected = ty.shape[depth] if depth < len(ty.shape) else 0
        if count != expected:
            raise self.fail(f"tensor literal has {count} elements at depth {depth}, shape says {expected}")

    def scalar_literal(self, dtype: str) -> object:
        """One literal of `dtype`, range-checked for integers."""
        tok = self.next()
        if dtype == "string" and tok.kind == "string":
            return tok.text
        if dtype == "bool" and tok.kind == "ident" and tok.text in ("true", "false"):
            return tok.text == "true"
        if dtype in INT_DTYPES and tok.kind == "number":
            v = parse_int_literal(tok.text)
            info = np.iinfo(NUMPY_DTYPES[dtype])
            if v is None or not info.min <= v <= info.max:
                raise MilSyntaxError(f"line {tok.line}: {tok.text!r} is not a valid {dtype}")
            return v
        if dtype in FLOAT_DTYPES and tok.kind == "number":
            return parse_float_literal(tok.text)
        if dtype in FLOAT_DTYPES and tok.kind == "ident" and tok.text in ("inf", "nan"):
            return math.inf if tok.text == "inf" else math.nan
        raise MilSyntaxError(f"line {tok.line}: expected a {dtype} literal, found {tok.text!r}")


def parse_program(src: str) -> MilProgram:
    """Parses one program's text."""
    return Parser(src).program()


# --------------------------------------------------------------------------
# Values for coremltools
# --------------------------------------------------------------------------


class BlobFiles:
    """Opens each weight file of one kernel once, under the kernel directory."""

    def __init__(self, kernel_dir: Path) -> None:
        self.kernel_dir = kernel_dir.resolve()
        self.readers: Dict[Path, object] = {}

    def read(self, blob: BlobRef) -> np.ndarray:
        """The blob's payload as an array of the MIL-declared dtype and shape."""
        if not blob.path.startswith(MODEL_PATH_PREFIX):
            raise CheckError(f"BLOBFILE path {blob.path!r} does not start with {MODEL_PATH_PREFIX}")
        path = (self.kernel_dir / blob.path[len(MODEL_PATH_PREFIX):]).resolve()
        if self.kernel_dir not in path.parents:
            raise CheckError(f"BLOBFILE path {blob.path!r} leaves the model directory")
        if not path.is_file():
            raise CheckError(f"weight file {blob.path!r} is missing ({path})")
        if blob.ty.dtype not in BLOB_READERS:
            raise CheckError(f"no blob reader for dtype {blob.ty.dtype}")
        method, view = BLOB_READERS[blob.ty.dtype]
        if path not in self.readers:
            self.readers[path] = libmilstoragepython._BlobStorageReader(str(path))
        try:
            raw = getattr(self.readers[path], method)(blob.offset)
        except (RuntimeError, ValueError, IndexError) as e:
            raise CheckError(
                f"coremltools' blob reader rejects {blob.path} offset {blob.offset} as {blob.ty.dtype}: {e}"
            ) from e
        if blob.ty.dtype in SUB_BYTE_DTYPES:
            data = sub_byte_values(np.asarray(raw), blob)
        else:
            data = np.asarray(raw).view(view)
        want = int(np.prod(blob.ty.shape))
        if data.size != want:
            raise CheckError(
                f"blob {blob.path} offset {blob.offset} holds {data.size} {blob.ty.dtype} elements, "
                f"{blob.ty} needs {want}"
            )
        return data.reshape(blob.ty.shape)


def sub_byte_values(raw: np.ndarray, blob: BlobRef) -> np.ndarray:
    """The unpacked values coremltools' reader returns for a sub-byte blob
    (one per byte), range-checked and typed with coremltools' numpy dtype for
    the MIL dtype (`types.np_uint4_dtype`, ...), as its MIL loader does."""
    builtin = SUB_BYTE_DTYPES[blob.ty.dtype]
    bits = builtin.get_bitwidth()
    lo, hi = (0, (1 << bits) - 1) if builtin.is_unsigned() else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if raw.size and (int(raw.min()) < lo or int(raw.max()) > hi):
        raise CheckError(
            f"blob {blob.path} offset {blob.offset}: {blob.ty.dtype} values outside [{lo}, {hi}] "
            f"(min {int(raw.min())}, max {int(raw.max())})"
        )
    return raw.astype(types.nptype_from_builtin(builtin))


def literal_to_python(value: Value, blobs: BlobFiles) -> object:
    """A literal as the numpy/python value `mb.const(val=...)` takes."""
    if isinstance(value, Scalar):
        if value.dtype == "string":
            return str(value.value)
        return NUMPY_DTYPES[value.dtype](value.value)
    if isinstance(value, TensorLiteral):
        if value.ty.dtype == "string":
            raise CheckError("string tensor literals are not supported")
        arr = np.array(value.values, dtype=NUMPY_DTYPES[value.ty.dtype])
        return arr.reshape(value.ty.shape)
    return blobs.read(value)


def declared_type_str(ty: ValueType) -> str:
    """Our declared type, in the MIL spelling."""
    return str(ty)


def inferred_type_str(sym_type: object) -> str:
    """coremltools' inferred type in the MIL spelling, e.g.
    `tensor<fp16, [1, 64, 1, 32]>`, `int32`, `string`."""
    if types.is_tensor(sym_type):
        dims = ", ".join(str(d) for d in sym_type.get_shape())
        return f"tensor<{types.builtin_to_string(sym_type.get_primitive())}, [{dims}]>"
    if types.is_scalar(sym_type) or types.is_str(sym_type):
        return types.builtin_to_string(sym_type)
    return repr(sym_type)


def check_type(where: str, declared: ValueType, var: object) -> None:
    """Fails unless coremltools' inferred type of `var` equals `declared`
    (a rank-0 tensor is not accepted for a scalar or the reverse)."""
    inferred = inferred_type_str(var.sym_type)  # type: ignore[attr-defined]
    if inferred != declared_type_str(declared):
        raise CheckError(f"{where}: declared {declared}, coremltools infers {inferred}")


# --------------------------------------------------------------------------
# Rebuilding a function with the MIL builder
# --------------------------------------------------------------------------


def mil_op_class(op: str) -> type:
    """The coremltools op class of `op` in the current function's opset, or
    CheckError when `op` is not a MIL op of that opset (private `_` ops and
    `const`, which is handled separately, excluded)."""
    versions = SSAOpRegistry.core_ops.get(op)
    if op.startswith("_") or op == "const" or not versions:
        raise CheckError(f"`{op}` is not a MIL op")
    try:
        return SSAOpRegistry._get_core_op_cls(op)
    except ValueError as e:
        raise CheckError(f"`{op}` is not available in this opset: {e}") from e


def build_const(st: Statement, blobs: BlobFiles) -> object:
    """`<type> <name> = const()[name = .., val = ..];` as an `mb.const`."""
    if st.args:
        raise CheckError(f"const takes no arguments, got {sorted(st.args)}")
    if set(st.attrs) != {"val"}:
        raise CheckError(f"const needs exactly the attributes name and val, got {sorted(st.attrs)}")
    val = st.attrs["val"]
    literal_type = val.ty if isinstance(val, (TensorLiteral, BlobRef)) else ScalarType(val.dtype)
    if literal_type != st.ty:
        raise CheckError(f"const value is {literal_type}, statement declares {st.ty}")
    return mb.const(val=literal_to_python(val, blobs), name=st.name)


def resolve_arg(arg: Arg, env: Dict[str, object], blobs: BlobFiles, anon: Callable[[], str]) -> object:
    """An argument as the Var (or tuple of Vars) the builder takes."""
    if isinstance(arg, VarArg):
        if arg.name not in env:
            raise CheckError(f"`{arg.name}` is not defined before use")
        return env[arg.name]
    if isinstance(arg, TupleArg):
        missing = [n for n in arg.names if n not in env]
        if missing:
            raise CheckError(f"{missing} not defined before use")
        return tuple(env[n] for n in arg.names)
    return mb.const(val=literal_to_python(arg.value, blobs), name=anon())


# Ops whose operands coremltools' MIL loader also takes from the attribute
# list (`coremltools/converters/mil/frontend/milproto/load.py`,
# `_load_operation`: `const` and every `constexpr_*` op go through
# `_load_const_op`, which merges attributes and inputs into the op's
# arguments; every other op may carry only the `name` attribute).
ATTRIBUTE_OPERAND_PREFIX = "constexpr_"


def writer_form(var: object) -> str:
    """Where coremltools' own MIL writer puts the operands of the op that
    made `var` (`converters/mil/backend/mil/load.py`, `translate_constexpr`):
    `attributes` for a constexpr op whose version is iOS17 or older (e.g.
    iOS16's constexpr_affine_dequantize), `inputs` for iOS18 ones (e.g.
    iOS18's constexpr_lut_to_dense)."""
    return "attributes" if var.op.opset_version <= ct.target.iOS17 else "inputs"  # type: ignore[attr-defined]


def build_op(
    st: Statement, env: Dict[str, object], blobs: BlobFiles, anon: Callable[[], str], notes: List[str]
) -> object:
    """A non-const statement through `getattr(mb, op)(**args)`: unknown names,
    missing or extra arguments and type-domain violations raise in
    coremltools' op definitions. Operands in the attribute list are taken
    only where coremltools' MIL loader takes them (constexpr_* ops); a
    constexpr op whose operands are not where coremltools' writer would put
    them is accepted (its loader reads both) and recorded in `notes`."""
    op_cls = mil_op_class(st.op)
    if st.attrs and not st.op.startswith(ATTRIBUTE_OPERAND_PREFIX):
        raise CheckError(
            f"attributes {sorted(st.attrs)} are not allowed on `{st.op}` (coremltools' MIL loader "
            f"takes operands from attributes only for const and {ATTRIBUTE_OPERAND_PREFIX}* ops; "
            f"other ops carry only `name`)"
        )
    both = sorted(set(st.args) & set(st.attrs))
    if both:
        raise CheckError(f"operand(s) {both} given both as arguments and as attributes")
    known = op_cls.input_spec.input_types
    unknown = sorted(k for k in [*st.args, *st.attrs] if k not in known)
    if unknown:
        raise CheckError(f"`{st.op}` has no argument(s) {unknown}; it takes {sorted(known)}")
    kwargs = {k: resolve_arg(a, env, blobs, anon) for k, a in st.args.items()}
    kwargs.update({k: resolve_arg(InlineArg(v), env, blobs, anon) for k, v in st.attrs.items()})
    try:
        out = getattr(mb, st.op)(name=st.name, **kwargs)
    except (ValueError, TypeError, RuntimeError, AssertionError, KeyError, IndexError, NotImplementedError) as e:
        raise CheckError(f"coremltools rejects it: {type(e).__name__}: {e}") from e
    if isinstance(out, (list, tuple)):
        raise CheckError(f"`{st.op}` has {len(out)} outputs, the statement declares one")
    if st.op.startswith(ATTRIBUTE_OPERAND_PREFIX) and kwargs:
        given = "attributes" if st.attrs and not st.args else "inputs" if st.args and not st.attrs else "mixed"
        if given != writer_form(out):
            notes.append(
                f"`{st.op}` ({ct.target(out.op.opset_version).name} op) has its operands as {given}; "  # type: ignore[attr-defined]
                f"coremltools' writer puts them in {writer_form(out)}"
            )
    return out


def build_statement(
    st: Statement, env: Dict[str, object], blobs: BlobFiles, anon: Callable[[], str], notes: List[str]
) -> None:
    """Builds one statement, checks its inferred type and binds its name."""
    if st.name in env:
        raise CheckError(f"`{st.name}` is defined twice")
    var = build_const(st, blobs) if st.op == "const" else build_op(st, env, blobs, anon, notes)
    check_type("output type", st.ty, var)
    env[st.name] = var


def build_function(fn: MilFunction, blobs: BlobFiles, notes: List[str]) -> Function:
    """Rebuilds one MIL function with the coremltools builder in the opset it
    names; raises CheckError naming the failing statement."""
    if fn.opset not in OPSETS:
        raise CheckError(f"function {fn.name}: unknown opset `{fn.opset}`")
    if fn.opset != EXPECTED_OPSET:
        raise CheckError(f"function {fn.name}: opset `{fn.opset}`, expected `{EXPECTED_OPSET}`")
    for name, ty in fn.inputs:
        if ty.dtype not in NUMPY_DTYPES:
            raise CheckError(f"function {fn.name}: input {name} has dtype {ty.dtype}")
    specs = {
        name: mb.placeholder(shape=ty.shape, dtype=types.string_to_builtin(ty.dtype))
        for name, ty in fn.inputs
    }
    counter = iter(range(1 << 30))
    anon = lambda: f"__inline_const_{next(counter)}"  # noqa: E731
    with Function(specs, opset_version=OPSETS[fn.opset]) as func:
        env: Dict[str, object] = dict(func.inputs)
        for st in fn.body:
            try:
                build_statement(st, env, blobs, anon, notes)
            except CheckError as e:
                raise CheckError(f"function {fn.name}, line {st.line}, statement `{st.name}` = {st.op}(...): {e}") from e
        outputs = []
        for name in fn.outputs:
            if name not in env:
                raise CheckError(f"function {fn.name}: output `{name}` is not defined")
            outputs.append(env[name])
        if not outputs:
            raise CheckError(f"function {fn.name}: no outputs")
        func.set_outputs(outputs)
    declared = {st.name: st.ty for st in fn.body}
    declared.update(dict(fn.inputs))
    for name, var in zip(fn.outputs, func.outputs):
        check_type(f"function {fn.name} output `{name}`", declared[name], var)
    return func


def check_program_text(src: str, kernel_dir: Path, notes: List[str]) -> None:
    """Parses and rebuilds one program; raises CheckError (or MilSyntaxError)
    on the first problem. Accepted divergences from the form coremltools'
    writer would produce are appended to `notes`."""
    prog = parse_program(src)
    if prog.version != "1.3":
        raise CheckError(f"program version {prog.version}, expected 1.3")
    if not prog.functions:
        raise CheckError("program has no function")
    names = [f.name for f in prog.functions]
    if len(set(names)) != len(names):
        raise CheckError(f"duplicate function names {names}")
    blobs = BlobFiles(kernel_dir)
    program = Program()
    for fn in prog.functions:
        func = build_function(fn, blobs, notes)
        try:
            program.add_function(fn.name, func)
        except ValueError as e:
            raise CheckError(f"function {fn.name}: coremltools rejects the opset: {e}") from e
    try:
        program.validate()
        program._check_early_error_out_for_invalid_program()
    except (ValueError, AssertionError) as e:
        raise CheckError(f"coremltools' program checks reject it: {e}") from e


def check_kernel(kernel_dir: Path, notes: Optional[List[str]] = None) -> Optional[str]:
    """None when DIR/<kernel>/model.mil is valid, else the error message;
    notes on accepted programs go to `notes`."""
    mil = kernel_dir / "model.mil"
    if not mil.is_file():
        return f"{mil} is missing"
    try:
        check_program_text(mil.read_text(encoding="utf-8"), kernel_dir, [] if notes is None else notes)
    except (CheckError, MilSyntaxError) as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 -- counted as a FAILURE, never a pass
        return f"checker error (counted as a failure): {type(e).__name__}: {e}"
    return None


# --------------------------------------------------------------------------
# Emitted directories
# --------------------------------------------------------------------------


def kernels_of(emit_dir: Path) -> List[str]:
    """Kernel names listed by DIR/index.json, in dispatch order."""
    index = json.loads((emit_dir / "index.json").read_text(encoding="utf-8"))
    names = [k["name"] for k in index["kernels"]]
    on_disk = sorted(p.name for p in emit_dir.iterdir() if p.is_dir())
    if sorted(names) != on_disk:
        raise CheckError(f"{emit_dir}: index.json lists {sorted(names)}, directories are {on_disk}")
    return names


def check_dirs(dirs: List[Path]) -> int:
    """Checks every program of every DIR; prints a line per program and the
    summary; returns the exit status."""
    passed = failed = 0
    # note text -> (statements, programs) over all accepted programs
    notes: Dict[str, List[int]] = {}
    # constexpr op -> statements in accepted programs
    constexpr_ops: Dict[str, int] = {}
    for emit_dir in dirs:
        try:
            names = kernels_of(emit_dir)
        except (OSError, KeyError, ValueError, CheckError) as e:
            print(f"FAIL {emit_dir}: cannot list its kernels: {e}")
            failed += 1
            continue
        for name in names:
            program_notes: List[str] = []
            err = check_kernel(emit_dir / name, program_notes)
            if err is None:
                passed += 1
                print(f"ok   {emit_dir}/{name}")
                for text in set(program_notes):
                    counts = notes.setdefault(text, [0, 0])
                    counts[0] += program_notes.count(text)
                    counts[1] += 1
                prog = parse_program((emit_dir / name / "model.mil").read_text(encoding="utf-8"))
                for st in (st for fn in prog.functions for st in fn.body if st.op.startswith("constexpr_")):
                    constexpr_ops[st.op] = constexpr_ops.get(st.op, 0) + 1
            else:
                failed += 1
                print(f"FAIL {emit_dir}/{name}: {err}")
    if constexpr_ops:
        print("compressed weights in accepted programs: " + ", ".join(f"{n} {op}" for op, n in sorted(constexpr_ops.items())))
    for text, (statements, programs) in sorted(notes.items()):
        print(f"note: {statements} statements in {programs} accepted programs: {text} (its MIL loader reads both)")
    print(f"{passed} passed, {failed} failed")
    if passed + failed == 0:
        print("error: no program found", file=sys.stderr)
        return 1
    return 1 if failed else 0


# --------------------------------------------------------------------------
# Self-test: mutations of real programs must be rejected
# --------------------------------------------------------------------------

LINE_RE = re.compile(r"^(\s*)(tensor<(\w+), \[([0-9, ]+)\]>) (\w+) = (\w+)\((.*)$")


def first_line(src: str, op: str) -> Tuple[int, re.Match]:
    """Index and match of the first statement line of op `op`."""
    for i, line in enumerate(src.splitlines()):
        m = LINE_RE.match(line)
        if m and m.group(6) == op:
            return i, m
    raise CheckError(f"self-test: no `{op}` statement in the program")


def replace_line(src: str, index: int, new: str) -> str:
    """`src` with line `index` replaced by `new`."""
    lines = src.splitlines()
    lines[index] = new
    return "\n".join(lines) + "\n"


def mutate_op_name(src: str) -> str:
    """The first conv renamed to an op that does not exist."""
    i, m = first_line(src, "conv")
    return replace_line(src, i, m.string.replace("= conv(", "= conv_nonexistent(", 1))


def mutate_arg_name(src: str) -> str:
    """The first conv's `weight` argument misspelled."""
    i, m = first_line(src, "conv")
    return replace_line(src, i, m.string.replace("weight = ", "wieght = ", 1))


def mutate_missing_arg(src: str) -> str:
    """The first conv's required `x` argument dropped."""
    i, m = first_line(src, "conv")
    new = re.sub(r", x = \w+\)", ")", m.string, count=1)
    assert new != m.string
    return replace_line(src, i, new)


def mutate_arg_type(src: str) -> str:
    """The first conv's `pad_type` (a string) given its int32 `groups` const."""
    i, m = first_line(src, "conv")
    new = re.sub(r"pad_type = \w+", "pad_type = " + re.search(r"groups = (\w+)", m.string).group(1), m.string, count=1)
    return replace_line(src, i, new)


def mutate_shape(src: str) -> str:
    """The first conv's declared output shape with its last dim doubled."""
    i, m = first_line(src, "conv")
    dims = [int(d) for d in m.group(4).split(", ")]
    dims[-1] *= 2
    new_ty = f"tensor<{m.group(3)}, [{', '.join(map(str, dims))}]>"
    return replace_line(src, i, m.string.replace(m.group(2), new_ty, 1))


def mutate_dtype(src: str) -> str:
    """The first conv's declared output dtype fp16 -> fp32."""
    i, m = first_line(src, "conv")
    return replace_line(src, i, m.string.replace("tensor<fp16,", "tensor<fp32,", 1))


def mutate_undefined_name(src: str) -> str:
    """The first conv reading an SSA name nothing defines."""
    i, m = first_line(src, "conv")
    return replace_line(src, i, re.sub(r"x = \w+\)", "x = no_such_value)", m.string, count=1))


def mutate_blob_offset(src: str) -> str:
    """The first BLOBFILE offset moved 64 bytes on, onto the payload."""
    m = re.search(r"offset = uint64\((\d+)\)", src)
    if m is None:
        raise CheckError("self-test: no BLOBFILE in the program")
    return src[: m.start(1)] + str(int(m.group(1)) + 64) + src[m.end(1):]


def blob_const_line(src: str) -> Tuple[int, re.Match]:
    """Index and match of the first BLOBFILE const statement line."""
    for i, line in enumerate(src.splitlines()):
        m = LINE_RE.match(line)
        if m and m.group(6) == "const" and "BLOBFILE(" in line:
            return i, m
    raise CheckError("self-test: no BLOBFILE const in the program")


def mutate_blob_dtype(src: str) -> str:
    """The first BLOBFILE const declared (statement and literal) fp32 instead
    of the fp16 its blob holds."""
    i, m = blob_const_line(src)
    return replace_line(src, i, m.string.replace(m.group(2), m.group(2).replace("fp16", "fp32")))


def mutate_blob_shape(src: str) -> str:
    """The first BLOBFILE const declared (statement and literal) with twice
    the elements its blob holds."""
    i, m = blob_const_line(src)
    dims = [int(d) for d in m.group(4).split(", ")]
    dims[0] *= 2
    new_ty = f"tensor<{m.group(3)}, [{', '.join(map(str, dims))}]>"
    return replace_line(src, i, m.string.replace(m.group(2), new_ty))


def truncate_weights(kernel_dir: Path) -> None:
    """Cuts the last 2 bytes (one fp16 element) off every weight file."""
    for f in (kernel_dir / "weights").iterdir():
        data = f.read_bytes()
        f.write_bytes(data[:-2])


def delete_weights(kernel_dir: Path) -> None:
    """Removes the weight files."""
    shutil.rmtree(kernel_dir / "weights")


def mutate_conv_attribute_operand(src: str) -> str:
    """The first conv's `groups` operand moved into its attribute list, the
    form only const and constexpr_* ops may use."""
    i, m = first_line(src, "conv")
    new = re.sub(r"groups = \w+, ", "", m.string, count=1)
    new = new.replace(")[name = ", ")[groups = int32(1), name = ", 1)
    return replace_line(src, i, new)


TEXT_MUTATIONS: List[Tuple[str, Callable[[str], str], str]] = [
    ("unknown op name", mutate_op_name, "is not a MIL op"),
    ("misspelled argument name", mutate_arg_name, "has no argument"),
    ("missing required argument", mutate_missing_arg, "Required input x is missing"),
    ("argument of the wrong type", mutate_arg_type, "type domain"),
    ("declared shape disagrees", mutate_shape, "coremltools infers"),
    ("declared dtype disagrees", mutate_dtype, "coremltools infers"),
    ("undefined SSA name", mutate_undefined_name, "not defined before use"),
    ("BLOBFILE offset not a blob", mutate_blob_offset, "blob reader rejects"),
    ("BLOBFILE dtype disagrees with the blob", mutate_blob_dtype, "Metadata data type does not match"),
    ("BLOBFILE element count disagrees with the blob", mutate_blob_shape, "elements"),
    ("operand as an attribute of a non-constexpr op", mutate_conv_attribute_operand, "are not allowed on `conv`"),
]
FILE_MUTATIONS: List[Tuple[str, Callable[[Path], None], str]] = [
    ("truncated weight file", truncate_weights, "blob reader rejects"),
    ("missing weight file", delete_weights, "is missing"),
]


# -- compressed weights (constexpr ops in the attribute form) ---------------

# `key = tensor<dtype, [dims]>(BLOBFILE(path = string(".."), offset = uint64(N)))`
BLOB_OPERAND_RE = r"{key} = tensor<(?P<dtype>\w+), \[(?P<dims>[0-9, ]+)\]>\(BLOBFILE\(path = string\(\"(?P<path>[^\"]*)\"\), offset = uint64\((?P<offset>\d+)\)\)\)"


def blob_operand(line: str, key: str) -> re.Match:
    """The BLOBFILE operand `key` of a constexpr statement line."""
    m = re.search(BLOB_OPERAND_RE.format(key=re.escape(key)), line)
    if m is None:
        raise CheckError(f"self-test: no BLOBFILE operand `{key}` in {line.strip()[:80]}...")
    return m


def dims_of(m: re.Match) -> List[int]:
    """The dims of a matched operand or statement type."""
    return [int(d) for d in m.group("dims").split(", ")]


def with_operand_type(line: str, m: re.Match, dtype: str, dims: List[int]) -> str:
    """`line` with the operand `m` re-declared as tensor<dtype, [dims]>."""
    old = m.group(0)
    head = old[: old.index("tensor<")]
    tail = old[old.index(">(BLOBFILE") + 1:]
    return line.replace(old, f"{head}tensor<{dtype}, [{', '.join(map(str, dims))}]>{tail}", 1)


def lut_line(src: str) -> Tuple[int, str]:
    """Index and text of the first constexpr_lut_to_dense statement whose
    palettes come in more than one group along axis 0, with an even number
    of indices per group (so the mutations below keep element counts)."""
    for i, line in enumerate(src.splitlines()):
        if "= constexpr_lut_to_dense(" not in line:
            continue
        groups, rows = dims_of(blob_operand(line, "lut"))[0], dims_of(blob_operand(line, "indices"))[0]
        if groups > 1 and (rows // groups) % 2 == 0:
            return i, line
    raise CheckError("self-test: no constexpr_lut_to_dense with several even palette groups in the program")


def mutate_lut_palette_count(src: str) -> str:
    """Half the palette entries per group, twice the groups (same element
    count): 2^(bits-1) entries for 2^bits-entry indices."""
    i, line = lut_line(src)
    m = blob_operand(line, "lut")
    dims = dims_of(m)
    dims[0] *= 2
    dims[-2] //= 2
    return replace_line(src, i, with_operand_type(line, m, m.group("dtype"), dims))


def mutate_lut_groups(src: str) -> str:
    """The palette groups moved from axis 0 to axis 3, whose index extent (1)
    they do not divide."""
    i, line = lut_line(src)
    m = blob_operand(line, "lut")
    dims = dims_of(m)
    dims[3], dims[0] = dims[0], 1
    return replace_line(src, i, with_operand_type(line, m, m.group("dtype"), dims))


OTHER_INDEX_DTYPE = {"uint4": "uint8", "uint6": "uint4", "uint8": "uint4"}


def mutate_lut_index_dtype(src: str) -> str:
    """The index blob declared with another index dtype than the blob's."""
    i, line = lut_line(src)
    m = blob_operand(line, "indices")
    return replace_line(src, i, with_operand_type(line, m, OTHER_INDEX_DTYPE[m.group("dtype")], dims_of(m)))


def mutate_lut_index_count(src: str) -> str:
    """The index blob declared with twice the indices it holds."""
    i, line = lut_line(src)
    m = blob_operand(line, "indices")
    dims = dims_of(m)
    dims[0] *= 2
    return replace_line(src, i, with_operand_type(line, m, m.group("dtype"), dims))


def mutate_lut_ios16_shape(src: str) -> str:
    """iOS16's `shape` operand added to the iOS18 op, which has none."""
    i, line = lut_line(src)
    dims = dims_of(blob_operand(line, "indices"))
    shape = f"shape = tensor<uint32, [{len(dims)}]>([{', '.join(map(str, dims))}]), "
    return replace_line(src, i, line.replace("constexpr_lut_to_dense(", "constexpr_lut_to_dense(" + shape, 1))


def mutate_lut_missing_lut(src: str) -> str:
    """The `lut` operand dropped."""
    i, line = lut_line(src)
    return replace_line(src, i, line.replace(", " + blob_operand(line, "lut").group(0), "", 1))


def mutate_lut_operand_twice(src: str) -> str:
    """`lut` also given as an attribute."""
    i, line = lut_line(src)
    lut = blob_operand(line, "lut").group(0)
    return replace_line(src, i, line.replace(")[name = ", f")[{lut}, name = ", 1))


def mutate_lut_to_attributes(src: str) -> str:
    """The operands moved from the argument list to the attribute list (the
    iOS16 ops' form; coremltools' loader reads both, so it must be accepted)."""
    i, line = lut_line(src)
    ops = [blob_operand(line, k).group(0) for k in ("indices", "lut")]
    args = f"constexpr_lut_to_dense({', '.join(ops)})[name = "
    if args not in line:
        raise CheckError("self-test: constexpr_lut_to_dense arguments are not `indices, lut`")
    return replace_line(src, i, line.replace(args, f"constexpr_lut_to_dense()[{', '.join(ops)}, name = ", 1))


def mutate_constexpr_dtype(op: str) -> Callable[[str], str]:
    """The first `op` statement declared fp32 (its operands give fp16)."""

    def mutate(src: str) -> str:
        i, m = first_line(src, op)
        return replace_line(src, i, m.string.replace("tensor<fp16,", "tensor<fp32,", 1))

    return mutate


def lut_blob_dtype_in_file(kernel_dir: Path) -> None:
    """The index blob's metadata in the weight file says uint6 (code 13), or
    uint4 (code 11) where the MIL declares uint6."""
    _, line = lut_line((kernel_dir / "model.mil").read_text(encoding="utf-8"))
    b = blob_operand(line, "indices")
    declared = b.group("dtype")
    path = kernel_dir / b.group("path")[len(MODEL_PATH_PREFIX):]
    data = bytearray(path.read_bytes())
    at = int(b.group("offset"))
    if data[at:at + 4] != bytes.fromhex("efbeadde"):
        raise CheckError(f"self-test: no blob metadata sentinel at {path} offset {at}")
    data[at + 4:at + 8] = (11 if declared == "uint6" else 13).to_bytes(4, "little")
    path.write_bytes(bytes(data))


LUT_TEXT_MUTATIONS: List[Tuple[str, Callable[[str], str], Optional[str]]] = [
    ("operands as attributes (the iOS16 ops' form), accepted", mutate_lut_to_attributes, None),
    ("lut palette count is not 2^bits of the indices", mutate_lut_palette_count, "so the dtype of indices should be"),
    ("lut palette groups do not divide the indices", mutate_lut_groups, "should be divisible"),
    ("index blob declared with another dtype", mutate_lut_index_dtype, "Metadata data type does not match"),
    ("index blob element count disagrees", mutate_lut_index_count, "elements"),
    ("iOS16-only `shape` operand", mutate_lut_ios16_shape, "has no argument(s) ['shape']"),
    ("missing `lut` operand", mutate_lut_missing_lut, "Required input lut is missing"),
    ("operand given as argument and attribute", mutate_lut_operand_twice, "given both as arguments and as attributes"),
    ("declared dtype disagrees with the palette", mutate_constexpr_dtype("constexpr_lut_to_dense"), "coremltools infers"),
]
LUT_FILE_MUTATIONS: List[Tuple[str, Callable[[Path], None], str]] = [
    ("index blob of another dtype in the weight file", lut_blob_dtype_in_file, "Metadata data type does not match"),
]


def affine_line(src: str) -> Tuple[int, str]:
    """Index and text of the first constexpr_affine_dequantize statement."""
    i, m = first_line(src, "constexpr_affine_dequantize")
    return i, m.string


def mutate_int8_scale_length(src: str) -> str:
    """The scale vector replaced by an inline one of one more element."""
    i, line = affine_line(src)
    m = blob_operand(line, "scale")
    n = dims_of(m)[0] + 1
    literal = f"scale = tensor<fp16, [{n}]>([{', '.join(['1'] * n)}])"
    return replace_line(src, i, line.replace(m.group(0), literal, 1))


def mutate_int8_axis(src: str) -> str:
    """axis past the rank of quantized_data."""
    i, line = affine_line(src)
    new = re.sub(r"axis = int32\(-?\d+\)", "axis = int32(4)", line, count=1)
    return replace_line(src, i, new)


def mutate_int8_zero_point(src: str) -> str:
    """An fp16 zero point, outside the op's ZeroPointT domain."""
    i, line = affine_line(src)
    new = re.sub(r"zero_point = int8\(-?\d+\)", "zero_point = fp16(0)", line, count=1)
    return replace_line(src, i, new)


def mutate_int8_data_dtype(src: str) -> str:
    """quantized_data declared uint8 (a type the op takes) over the int8 blob."""
    i, line = affine_line(src)
    m = blob_operand(line, "quantized_data")
    return replace_line(src, i, with_operand_type(line, m, "uint8", dims_of(m)))


def mutate_int8_scale_name(src: str) -> str:
    """`scale` misspelled `scales`."""
    i, line = affine_line(src)
    return replace_line(src, i, line.replace(" scale = tensor<", " scales = tensor<", 1))


INT8_TEXT_MUTATIONS: List[Tuple[str, Callable[[str], str], str]] = [
    ("int8 scale vector of the wrong length", mutate_int8_scale_length, "needs to have same size as the dimension size"),
    ("int8 axis out of range", mutate_int8_axis, "Parameter axis needs to be in the range"),
    ("int8 zero point outside the type domain", mutate_int8_zero_point, "type domain"),
    ("quantized_data declared with another dtype than its blob", mutate_int8_data_dtype, "Metadata data type does not match"),
    ("misspelled constexpr attribute operand", mutate_int8_scale_name, "has no argument(s) ['scales']"),
    ("declared dtype disagrees with the scale", mutate_constexpr_dtype("constexpr_affine_dequantize"), "coremltools infers"),
]


@dataclass
class MutationSet:
    """Mutations of the first program of a DIR that `wants` picks."""

    title: str
    wants: Callable[[str], bool]
    text: List[Tuple[str, Callable[[str], str], Optional[str]]]  # expected error; None: must be accepted
    files: List[Tuple[str, Callable[[Path], None], str]]


BASE_SET = MutationSet(
    "fp16", lambda src: "= conv(" in src and "BLOBFILE(" in src, TEXT_MUTATIONS, FILE_MUTATIONS
)
COMPRESSED_SETS = [
    MutationSet("int8", lambda src: "= constexpr_affine_dequantize(" in src, INT8_TEXT_MUTATIONS, []),
    MutationSet("lut", lambda src: "= constexpr_lut_to_dense(" in src, LUT_TEXT_MUTATIONS, LUT_FILE_MUTATIONS),
]


def pick_program(emit_dir: Path, wants: Callable[[str], bool]) -> Optional[Path]:
    """The first kernel of DIR whose program `wants` accepts, or None."""
    for name in kernels_of(emit_dir):
        src = (emit_dir / name / "model.mil").read_text(encoding="utf-8")
        if wants(src):
            return emit_dir / name
    return None


Case = Tuple[str, Optional[Callable[[str], str]], Optional[Callable[[Path], None]], Optional[str]]


def run_cases(source: Path, title: str, cases: List[Case], tmp: Path) -> int:
    """Runs each case on a copy of `source` under `tmp`; prints a line per
    case and returns the number that did not end as expected."""
    original = (source / "model.mil").read_text(encoding="utf-8")
    failures = 0
    for what, text_fn, file_fn, expect in cases:
        kdir = tmp / f"case{len(list(tmp.iterdir()))}"
        shutil.copytree(source, kdir)
        err: Optional[str]
        try:
            if text_fn is not None:
                mutated = text_fn(original)
                if mutated == original:
                    raise CheckError("self-test: the mutation left the program unchanged")
                (kdir / "model.mil").write_text(mutated, encoding="utf-8")
            if file_fn is not None:
                file_fn(kdir)
        except CheckError as e:
            failures += 1
            print(f"FAIL self-test {source.parent.name}/{source.name} ({title}): {what}: cannot mutate: {e}")
            continue
        err = check_kernel(kdir)
        if expect is None:
            ok = err is None
            detail = "accepted" if ok else f"REJECTED: {err}"
        else:
            ok = err is not None and expect in err
            detail = f"rejected: {err}" if err is not None else "ACCEPTED"
            if err is not None and not ok:
                detail = f"rejected for another reason (wanted {expect!r}): {err}"
        failures += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} self-test {source.parent.name}/{source.name} ({title}): {what}: {detail}")
    return failures


def self_test(dirs: List[Path]) -> int:
    """Asserts that unmutated programs are accepted and every mutation is
    rejected with the expected reason: the fp16 set on the first DIR's first
    program with a conv and a BLOBFILE; on every DIR, the int8 and lut sets
    on the first program holding such a constexpr op (every DIR after the
    first must hold one). Returns the exit status."""
    sets: List[Tuple[Path, MutationSet]] = []
    problems: List[str] = []
    for k, emit_dir in enumerate(dirs):
        found = 0
        for mset in ([BASE_SET] if k == 0 else []) + COMPRESSED_SETS:
            source = pick_program(emit_dir, mset.wants)
            if source is not None:
                sets.append((source, mset))
                found += 1
            elif mset is BASE_SET:
                problems.append(f"{emit_dir}: no program with a conv and a BLOBFILE to mutate")
        if k > 0 and found == 0:
            problems.append(f"{emit_dir}: no program with a constexpr op to mutate")
    total = failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for source, mset in sets:
            cases: List[Case] = [("unmutated", None, None, None)]
            cases += [(n, f, None, e) for n, f, e in mset.text]
            cases += [(n, None, f, e) for n, f, e in mset.files]
            total += len(cases)
            failures += run_cases(source, mset.title, cases, Path(tmp))
    for p in problems:
        print(f"FAIL self-test: {p}")
    total += len(problems)
    failures += len(problems)
    print(f"self-test: {total - failures} passed, {failures} failed")
    return 1 if failures else 0


def main() -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="directories written by `anedvd kernels --emit`")
    ap.add_argument(
        "--self-test",
        action="store_true",
        help="mutate programs of the DIRs (fp16 set on the first; int8/lut sets on each); each mutation must be rejected",
    )
    a = ap.parse_args()
    if ct.__version__ != PINNED_COREMLTOOLS:
        print(f"warning: coremltools {ct.__version__}, this check is pinned to {PINNED_COREMLTOOLS}", file=sys.stderr)
    if a.self_test:
        if not a.dirs:
            ap.error("--self-test takes at least one DIR")
        return self_test(a.dirs)
    if not a.dirs:
        ap.error("no DIR given")
    return check_dirs(a.dirs)


if __name__ == "__main__":
    sys.exit(main())
