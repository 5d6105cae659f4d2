"""Compile operator graphs to one ANE program (MIL), run them and train on them.

Build a lazy graph with numpy-like operators, then ``compile`` its outputs
into a single MIL program and weight file: one program, one dispatch.
``validate`` checks the chosen runtime path's rules first and names the
refused node. ``grad`` adds reverse-mode gradients as ordinary graph ops,
so a training step (``Trainer``) is one program too.

The engine here is anedvd's fp16 MIL simulator on the CPU: every value is
fp16 between ops, as on the ANE. Nothing in this package has run on an ANE;
``Program.unit`` says what ran.

    import numpy as np
    import anedvd.forge as af
    x = af.input((64, 128), name="x")
    w = af.param(np.random.randn(128, 32).astype(np.float32) * 0.1, name="w")
    y = (x @ w).relu().mean(axis=-1)
    prog = af.compile(y)
    out = prog(x=np.ones((64, 128), np.float32))
"""

from __future__ import annotations

import itertools
from typing import Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _forge

__all__ = [
    "Tensor", "Program", "Trainer", "input", "param", "constant", "concat",
    "compile", "validate", "grad", "tune", "capabilities", "attention",
    "cg", "bicgstab", "fft", "fft2", "reset", "ForgeError",
]

ForgeError = ValueError
_graph = _forge.Graph()
_names = itertools.count()


def reset() -> None:
    """Start a new default graph (tensors of the old one stay valid)."""
    global _graph
    _graph = _forge.Graph()


def _f32(a) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    if not np.all(np.isfinite(arr)):
        raise ForgeError("values must be finite")
    return arr


def _from(shape, data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4").reshape(tuple(shape)).copy()


class Tensor:
    """A node of a lazy graph. Operators build new nodes; nothing runs until ``compile``."""

    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, native):
        self._t = native

    # ---- facts
    @property
    def shape(self):
        return tuple(self._t.shape)

    @property
    def name(self) -> str:
        return self._t.name

    @property
    def op(self) -> str:
        return self._t.op

    @property
    def ndim(self) -> int:
        return len(self._t.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name}: {self.op} {self.shape})"

    def named(self, name: str) -> "Tensor":
        return Tensor(self._t.named(name))

    # ---- operators
    def _other(self, y) -> "Tensor":
        if isinstance(y, Tensor):
            return y
        a = np.asarray(y, dtype=np.float32)
        g = self._t.graph()
        if a.ndim == 0:
            return Tensor(g.scalar(float(a)))
        return Tensor(g.constant(list(a.shape), _f32(a).tobytes()))

    def _bin(self, op, y, flip=False):
        y = self._other(y)
        a, b = (y, self) if flip else (self, y)
        return Tensor(a._t.binary(op, b._t))

    def __add__(self, y): return self._bin("add", y)
    def __radd__(self, y): return self._bin("add", y, True)
    def __sub__(self, y): return self._bin("sub", y)
    def __rsub__(self, y): return self._bin("sub", y, True)
    def __mul__(self, y): return self._bin("mul", y)
    def __rmul__(self, y): return self._bin("mul", y, True)
    def __truediv__(self, y): return self._bin("div", y)
    def __rtruediv__(self, y): return self._bin("div", y, True)
    def __neg__(self): return Tensor(self._t.unary("neg"))

    def __matmul__(self, y):
        return Tensor(self._t.matmul(self._other(y)._t))

    def __rmatmul__(self, y):
        return Tensor(self._other(y)._t.matmul(self._t))

    def __pow__(self, p):
        if p == 2:
            return self.square()
        if p == 0.5:
            return self.sqrt()
        if p == -0.5:
            return self.rsqrt()
        raise ForgeError("only the powers 2, 0.5 and -0.5 are supported")

    def maximum(self, y): return self._bin("maximum", y)
    def minimum(self, y): return self._bin("minimum", y)

    # ---- element-wise
    def _u(self, op): return Tensor(self._t.unary(op))
    def exp(self): return self._u("exp")
    def log(self): return self._u("log")
    def sqrt(self): return self._u("sqrt")
    def rsqrt(self): return self._u("rsqrt")
    def relu(self): return self._u("relu")
    def sigmoid(self): return self._u("sigmoid")
    def tanh(self): return self._u("tanh")
    def abs(self): return self._u("abs")
    def sign(self): return self._u("sign")
    def square(self): return self._u("square")
    def silu(self): return self._u("silu")
    def gelu(self): return self._u("gelu")

    # ---- reductions
    def _axes(self, axis):
        if axis is None:
            return list(range(self.ndim))
        if isinstance(axis, int):
            return [axis]
        return list(axis)

    def sum(self, axis=None, keepdims=False): return Tensor(self._t.reduce("sum", self._axes(axis), keepdims))
    def mean(self, axis=None, keepdims=False): return Tensor(self._t.reduce("mean", self._axes(axis), keepdims))
    def max(self, axis=None, keepdims=False): return Tensor(self._t.reduce("max", self._axes(axis), keepdims))
    def softmax(self, axis=-1): return Tensor(self._t.softmax(axis))

    # ---- layout
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return Tensor(self._t.reshape(list(shape)))

    def transpose(self, *perm):
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = perm[0]
        if not perm:
            perm = tuple(reversed(range(self.ndim)))
        return Tensor(self._t.transpose(list(perm)))

    @property
    def T(self):
        return Tensor(self._t.unary("t"))

    def slice(self, begin, size): return Tensor(self._t.slice(list(begin), list(size)))
    def tile(self, reps): return Tensor(self._t.tile(list(reps)))
    def pad(self, pads): return Tensor(self._t.pad([list(p) for p in pads]))
    def reverse(self, axes): return Tensor(self._t.reverse(list(axes)))
    def broadcast_to(self, shape): return Tensor(self._t.broadcast_to(list(shape)))

    # ---- composites
    def conv2d(self, w, stride=(1, 1), padding=(0, 0, 0, 0), groups=1):
        return Tensor(self._t.conv2d(w._t, list(stride), list(padding), groups))

    def cross_entropy(self, targets):
        return Tensor(self._t.cross_entropy(self._other(targets)._t))

    def layer_norm(self, axis=-1, gamma=None, beta=None, eps=1e-5):
        return Tensor(self._t.layer_norm(self._axes(axis), _nat(gamma), _nat(beta), eps))

    def rms_norm(self, axis=-1, gamma=None, eps=1e-6):
        return Tensor(self._t.rms_norm(self._axes(axis), _nat(gamma), eps))

    def group_norm(self, groups, gamma=None, beta=None, eps=1e-5):
        return Tensor(self._t.group_norm(groups, _nat(gamma), _nat(beta), eps))


def _nat(t: Optional[Tensor]):
    return None if t is None else t._t


def _name(name, prefix):
    return name if name is not None else f"{prefix}{next(_names)}"


def input(shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """A value supplied at every run (fp16 on the engine)."""
    return Tensor(_graph.input(_name(name, "input"), list(shape)))


def param(values, name: Optional[str] = None) -> Tensor:
    """A trainable weight with initial ``values`` (baked into programs, or carried by a Trainer)."""
    a = _f32(values)
    return Tensor(_graph.param(_name(name, "param"), list(a.shape), a.tobytes()))


def constant(values) -> Tensor:
    """A constant tensor."""
    a = _f32(values)
    return Tensor(_graph.constant(list(a.shape), a.tobytes()))


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    return Tensor(tensors[0]._t.graph().concat([t._t for t in tensors], axis))


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False) -> Tensor:
    """softmax(q kᵀ / √d (+ causal mask)) v over [..., S, D] operands."""
    return Tensor(q._t.attention(k._t, v._t, causal))


def _opts(options: dict) -> dict:
    return {k: v for k, v in options.items() if v is not None}


class Program:
    """A compiled program: call it with numpy arrays, by input name or in declaration order."""

    def __init__(self, native, loaded=None):
        self._p = native
        self._loaded = loaded

    @property
    def unit(self) -> str:
        """What executes it: the simulator, or the driver it was loaded on."""
        return (self._loaded or self._p).unit()

    @property
    def dispatches(self) -> int:
        return self._p.dispatches()

    @property
    def statements(self) -> int:
        return self._p.statements()

    @property
    def inputs(self):
        return [(n, tuple(s)) for n, s in self._p.inputs()]

    @property
    def choices(self):
        """The spelling picked per node where there was a choice."""
        return self._p.choices()

    def mil(self) -> str:
        """The MIL text."""
        return self._p.mil()

    def load(self, driver: str = "sim") -> "Program":
        """Load on a runtime driver of the program's path: ``sim`` (the simulated
        driver of the in-memory or e5rt path) or ``ane`` (AppleNeuralEngine.framework
        for ``path="inmem"``, Espresso's e5rt for ``path="e5rt"``; raises where
        there is none)."""
        return Program(self._p, self._p.load(driver))

    def save(self, directory) -> None:
        """Write ``model.mil`` and ``weights/weight.bin`` (what the ANE compiler reads) into an empty directory."""
        self._p.save(str(directory))

    def __call__(self, *args, **kwargs):
        ins = self.inputs
        if len(args) > len(ins):
            raise ForgeError(f"{len(args)} positional inputs for {len(ins)} declared")
        feeds: Dict[str, bytes] = {}
        for (n, _), a in zip(ins, args):
            feeds[n] = _f32(a).tobytes()
        for n, a in kwargs.items():
            if n in feeds:
                raise ForgeError(f"input {n!r} given twice")
            feeds[n] = _f32(a).tobytes()
        want = dict(ins)
        for n, a in itertools.chain(zip([n for n, _ in ins], args), kwargs.items()):
            if n in want and tuple(np.shape(a)) != want[n] and int(np.prod(np.shape(a))) != int(np.prod(want[n])):
                raise ForgeError(f"input {n!r}: shape {np.shape(a)}, declared {want[n]}")
        outs = [_from(s, b) for _, s, b in (self._loaded or self._p).run(feeds)]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _outs(outputs) -> List:
    if len(outputs) == 1 and isinstance(outputs[0], (list, tuple)):
        outputs = outputs[0]
    return [t._t for t in outputs]


def compile(*outputs: Tensor, path: Optional[str] = None, softmax: Optional[str] = None,
            attention: Optional[str] = None, reduce: Optional[str] = None, matmul: Optional[str] = None,
            compress: Optional[str] = None, compress_param: Optional[dict] = None) -> Program:
    """Validate and compile ``outputs`` into one program.

    path: ``e5rt`` (default) or ``inmem``; softmax/attention/reduce: ``auto``,
    ``native`` (one op) or ``decomposed``; matmul: ``matmul`` or ``conv``; compress: ``fp16`` (off),
    ``int8``, ``lut8``, ``lut6`` or ``lut4`` for every param, or per param name
    with ``compress_param``.
    """
    o = _opts(dict(path=path, softmax=softmax, attention=attention, reduce=reduce, matmul=matmul,
                   compress=compress, compress_param=compress_param))
    return Program(_forge.compile(_outs(outputs), o))


def validate(*outputs: Tensor, path: Optional[str] = None, **options) -> None:
    """Raise ``ForgeError`` naming the first node the path's rules refuse."""
    _forge.validate(_outs(outputs), _opts(dict(path=path, **options)))


def grad(y: Tensor, wrt: Union[Tensor, Sequence[Tensor]]):
    """Gradients of one-element ``y`` with respect to ``wrt`` (graph ops, compiled like any other)."""
    single = isinstance(wrt, Tensor)
    ws = [wrt] if single else list(wrt)
    gs = [Tensor(t) for t in _forge.grad(y._t, [w._t for w in ws])]
    return gs[0] if single else gs


def tune(*outputs: Tensor, allow_compression: bool = False, tolerance: float = 1e-2, **options):
    """Pick the cheapest equivalent lowering by the cost model, checked against the literal one.

    Returns (options, report, cached): pass ``**options`` to ``compile``.
    """
    chosen, report, cached = _forge.tune(_outs(outputs), _opts(options), allow_compression, tolerance)
    return dict(chosen), [dict(r) for r in report], cached


def capabilities(path: Optional[str] = None) -> List[dict]:
    """The capability registry: per op (and spelling), its status on each runtime path."""
    rows = [dict(op=op, inmem=a, e5rt=b) for op, a, b in _forge.capabilities()]
    if path is not None:
        rows = [dict(op=r["op"], status=r[path]) for r in rows]
    return rows


class Trainer:
    """Training by compiled steps: loss, gradients and the optimizer update are one program.

    optimizer: ``sgd`` (with ``momentum``) or ``adam``. Weights and optimizer
    state are carried between steps as program state.
    """

    def __init__(self, loss: Tensor, params: Optional[Iterable[Tensor]] = None, optimizer: str = "sgd",
                 lr: float = 0.1, momentum: float = 0.0, **options):
        ps = None if params is None else [p._t for p in params]
        self._tr = _forge.Trainer(loss._t, ps, optimizer, lr, momentum, _opts(options))

    def step(self, **feeds) -> float:
        """One step; returns the loss before the update."""
        return self._tr.step({n: _f32(a).tobytes() for n, a in feeds.items()})

    def run(self, *outputs: Tensor, **feeds):
        """Evaluate ``outputs`` with the current weights."""
        res = self._tr.run(_outs(outputs), {n: _f32(a).tobytes() for n, a in feeds.items()})
        outs = [_from(s, b) for _, s, b in res]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def param(self, name: str) -> np.ndarray:
        return np.frombuffer(self._tr.param(name), dtype="<f4").copy()

    def save_step(self, directory) -> None:
        """Write the step program (``model.mil``, ``weights/weight.bin``) into an empty directory."""
        self._tr.save_step(str(directory))

    @property
    def steps(self) -> int:
        return self._tr.steps()

    @property
    def program(self):
        """(dispatches, statements, unit) of the step program."""
        return self._tr.program()


def cg(A: Tensor, b: Tensor, iterations: int) -> Tensor:
    """Conjugate gradients (SPD ``A`` [n, n], ``b`` [n, 1]) with a fixed iteration count."""
    return Tensor(_forge.cg(A._t, b._t, iterations))


def bicgstab(A: Tensor, b: Tensor, iterations: int) -> Tensor:
    """BiCGSTAB (general ``A``) with a fixed iteration count."""
    return Tensor(_forge.bicgstab(A._t, b._t, iterations))


def fft(re: Tensor, im: Tensor):
    """DFT along the last axis as (re, im), factored n = n1·n2."""
    r, i = _forge.fft(re._t, im._t)
    return Tensor(r), Tensor(i)


def fft2(re: Tensor, im: Tensor):
    """2-D DFT over the last two axes as (re, im)."""
    r, i = _forge.fft2(re._t, im._t)
    return Tensor(r), Tensor(i)
