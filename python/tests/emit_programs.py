"""Writes a suite of forge programs in the layout `anedvd kernels --emit` uses
(DIR/index.json, DIR/<name>/model.mil, DIR/<name>/weights/weight.bin), for
scripts/check-mil-coremltools.py to rebuild with coremltools' op definitions.

Covers every graph op and lowering choice: element-wise ops, products,
reductions (native and by matmul), softmax (native and decomposed),
attention (composite and decomposed, causal), norms, layout ops, the
cross-entropy training step with its gradients and SGD/Adam updates, conv
gradients, CG, BiCGSTAB, the FFT, and every compression format.

    python tests/emit_programs.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import numpy as np

import anedvd.forge as af

rng = np.random.default_rng(0)


def programs():
    x = af.input((4, 16), name="x")
    w = af.param(rng.normal(size=(16, 16)), name="w")
    b = af.param(rng.normal(size=(16,)), name="b")
    y = x @ w + b
    elementwise = [(y.exp() + y.abs().log() + (y.square() + 1.0).sqrt() + (y.square() + 1.0).rsqrt()
                    + y.sigmoid() + y.tanh() + y.sign() + y.relu() + y.maximum(x) - y.minimum(x) / (y.abs() + 1.0)
                    + y.silu() + y.gelu())]
    yield "elementwise", elementwise, {}
    for c in ("int8", "lut8", "lut6", "lut4"):
        yield f"compress_{c}", [y], dict(compress=c)
    yield "matmul_as_conv", [y], dict(matmul="conv")
    red = [y.sum(axis=1), y.mean(axis=(0, 1)), y.max(axis=0, keepdims=True)]
    yield "reduce_native", red, dict(reduce="native")
    yield "reduce_matmul", red, dict(reduce="decomposed")
    yield "softmax_native", [y.softmax(-1)], dict(softmax="native")
    yield "softmax_decomposed", [x.slice((0, 0), (4, 10)).softmax(-1)], {}
    layout = [af.concat([y.reshape(2, 32), y.T.reshape(2, 32), x.reshape(2, 32)], axis=0).tile((1, 2))
              .pad([(1, 0), (0, 1)]).reverse([1]).transpose(1, 0)]
    yield "layout", layout, {}
    q = af.input((2, 8, 16), name="q")
    yield "attention_composite", [af.attention(q, q, q)], dict(attention="native")
    yield "attention_causal", [af.attention(q, q, q, causal=True)], {}
    g = af.param(np.ones(16), name="g")
    n4 = af.input((2, 4, 3, 3), name="n4")
    yield "norms", [x.layer_norm(-1, g, b), x.rms_norm(-1, g), n4.group_norm(2)], {}
    t = af.input((4, 16), name="t")
    loss = y.cross_entropy(t)
    yield "cross_entropy_grads", [loss] + af.grad(loss, [x, w, b]), {}
    img = af.input((2, 3, 6, 6), name="img")
    k = af.param(rng.normal(size=(4, 3, 3, 3)), name="k")
    cl = img.conv2d(k, padding=(1, 1, 1, 1)).relu().mean()
    yield "conv_grads", [cl] + af.grad(cl, [img, k]), {}
    kg = af.param(rng.normal(size=(6, 1, 3, 3)), name="kg")
    cs = img.conv2d(kg, stride=(2, 2), padding=(1, 1, 1, 1), groups=3).relu().mean()
    yield "conv_grads_strided_grouped", [cs] + af.grad(cs, [img, kg]), {}
    a, rhs = af.input((16, 16), name="a"), af.input((16, 1), name="rhs")
    yield "cg", [af.cg(a, rhs, 4)], {}
    yield "bicgstab", [af.bicgstab(a, rhs, 3)], {}
    re, im = af.input((8, 16), name="re"), af.input((8, 16), name="im")
    yield "fft2", list(af.fft2(re, im)), {}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=False)
    names = []
    for name, outputs, options in programs():
        af.compile(*outputs, **options).save(out / name)
        names.append(name)
    # training steps: the optimizer updates are their own ops
    for opt in ("sgd", "adam"):
        af.reset()
        x = af.input((4, 16), name="x")
        t = af.input((4, 10), name="t")
        w = af.param(rng.normal(size=(16, 10)), name="w")
        tr = af.Trainer((x @ w).cross_entropy(t), optimizer=opt, lr=0.1, momentum=0.9)
        tr.save_step(out / f"train_{opt}")
        names.append(f"train_{opt}")
    (out / "index.json").write_text(json.dumps({"kernels": [{"name": n} for n in names]}, indent=1))
    print(f"{len(names)} programs in {out}")


if __name__ == "__main__":
    main()
