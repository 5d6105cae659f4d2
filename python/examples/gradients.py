"""Gradients of every differentiable op against numpy central differences in float64.

For each op f, forge differentiates y = sum(f(inputs) * R) (R a fixed random
tensor) and the compiled gradient program runs on the fp16 simulator; numpy
evaluates the same f in float64 and takes central differences. Relative L2
error must be within fp16 tolerance (3e-2).
"""

import numpy as np

import anedvd.forge as af

TOL = 3e-2
rng = np.random.default_rng(3)


def away(shape, lo=0.2, hi=1.5):
    """Values with |x| in [lo, hi]: no kinks or ties near them."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1, 1], shape)


def pos(shape):
    return rng.uniform(0.5, 2.0, shape)


def np_softmax(z, axis=-1):
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_conv(x, w, pad, stride=1, groups=1):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, ho, wo))
    og = o // groups
    for gi in range(groups):
        xs, ws = x[:, gi * ci:(gi + 1) * ci], w[gi * og:(gi + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride]
                out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def np_conv_hw(x, w):
    """Stride 2, padding 1 on rows only (the stride2 case's asymmetric padding)."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0)))
    return np_conv(xp, w, 0, stride=2)


def np_attention(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        t = k.shape[-2]
        s = s + np.where(np.arange(t)[None, :] <= np.arange(q.shape[-2])[:, None] + t - q.shape[-2], 0, -30000.0)
    return np_softmax(s) @ v


def ln(x, axes):
    mu = x.mean(axes, keepdims=True)
    c = x - mu
    return c / np.sqrt((c ** 2).mean(axes, keepdims=True) + 1e-5)


CASES = [
    # name, input arrays, forge f, numpy f
    ("add", [away((3, 4)), away((4,))], lambda a, b: a + b, lambda a, b: a + b),
    ("sub", [away((3, 4)), away((3, 1))], lambda a, b: a - b, lambda a, b: a - b),
    ("mul", [away((3, 4)), away((3, 4))], lambda a, b: a * b, lambda a, b: a * b),
    ("div", [away((3, 4)), pos((3, 4))], lambda a, b: a / b, lambda a, b: a / b),
    ("maximum", [away((3, 4)), away((3, 4))], lambda a, b: a.maximum(b), np.maximum),
    ("minimum", [away((3, 4)), away((3, 4))], lambda a, b: a.minimum(b), np.minimum),
    ("exp", [away((3, 4))], lambda a: a.exp(), np.exp),
    ("log", [pos((3, 4))], lambda a: a.log(), np.log),
    ("sqrt", [pos((3, 4))], lambda a: a.sqrt(), np.sqrt),
    ("rsqrt", [pos((3, 4))], lambda a: a.rsqrt(), lambda a: 1 / np.sqrt(a)),
    ("relu", [away((3, 4))], lambda a: a.relu(), lambda a: np.maximum(a, 0)),
    ("sigmoid", [away((3, 4))], lambda a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a))),
    ("tanh", [away((3, 4))], lambda a: a.tanh(), np.tanh),
    ("abs", [away((3, 4))], lambda a: a.abs(), np.abs),
    ("square", [away((3, 4))], lambda a: a.square(), np.square),
    ("silu", [away((3, 4))], lambda a: a.silu(), lambda a: a / (1 + np.exp(-a))),
    ("gelu", [away((3, 4))], lambda a: a.gelu(),
     lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))),
    ("matmul", [away((2, 3, 4)), away((4, 5))], lambda a, b: a @ b, lambda a, b: a @ b),
    ("matmul_T", [away((4, 3)), away((5, 4))], lambda a, b: a.T @ b.T, lambda a, b: a.T @ b.T),
    ("conv2d", [away((2, 3, 5, 5)), away((4, 3, 3, 3), 0.1, 0.5)], lambda x, w: x.conv2d(w, padding=(1, 1, 1, 1)),
     lambda x, w: np_conv(x, w, 1)),
    ("conv2d_stride2", [away((2, 2, 7, 6)), away((3, 2, 3, 2), 0.1, 0.5)],
     lambda x, w: x.conv2d(w, stride=(2, 2), padding=(1, 1, 0, 0)), lambda x, w: np_conv_hw(x, w)),
    ("conv2d_groups2", [away((2, 4, 5, 5)), away((6, 2, 3, 3), 0.1, 0.5)],
     lambda x, w: x.conv2d(w, padding=(2, 2, 2, 2), groups=2), lambda x, w: np_conv(x, w, 2, groups=2)),
    ("conv2d_depthwise_s2", [away((1, 3, 6, 6)), away((3, 1, 3, 3), 0.1, 0.5)],
     lambda x, w: x.conv2d(w, stride=(2, 2), padding=(1, 1, 1, 1), groups=3),
     lambda x, w: np_conv(x, w, 1, stride=2, groups=3)),
    ("sum", [away((3, 4, 5))], lambda a: a.sum(axis=(0, 2)), lambda a: a.sum((0, 2))),
    ("mean", [away((3, 40))], lambda a: a.mean(axis=-1, keepdims=True), lambda a: a.mean(-1, keepdims=True)),
    ("max", [rng.permutation(12).reshape(3, 4) / 6.0], lambda a: a.max(axis=1), lambda a: a.max(1)),
    ("softmax", [away((3, 8))], lambda a: a.softmax(-1), np_softmax),
    ("softmax10", [away((3, 10))], lambda a: a.softmax(-1), np_softmax),
    ("reshape", [away((3, 4))], lambda a: a.reshape(2, 6) * af.constant(np.arange(12).reshape(2, 6)),
     lambda a: a.reshape(2, 6) * np.arange(12).reshape(2, 6)),
    ("transpose", [away((2, 3, 4))], lambda a: a.transpose(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("slice", [away((4, 5))], lambda a: a.slice((1, 2), (2, 3)), lambda a: a[1:3, 2:5]),
    ("concat", [away((2, 3)), away((2, 2)), away((2, 1))], lambda a, b, c: af.concat([a, b, c], axis=1),
     lambda a, b, c: np.concatenate([a, b, c], 1)),
    ("tile", [away((2, 3))], lambda a: a.tile((2, 2)), lambda a: np.tile(a, (2, 2))),
    ("pad", [away((2, 3))], lambda a: a.pad([(1, 0), (0, 2)]), lambda a: np.pad(a, ((1, 0), (0, 2)))),
    ("reverse", [away((3, 4))], lambda a: a.reverse([1]), lambda a: a[:, ::-1]),
    ("attention", [away((2, 4, 8)), away((2, 4, 8)), away((2, 4, 8))],
     lambda q, k, v: af.attention(q, k, v), lambda q, k, v: np_attention(q, k, v, False)),
    ("attention_causal", [away((4, 8)), away((6, 8)), away((6, 8))],
     lambda q, k, v: af.attention(q, k, v, causal=True), lambda q, k, v: np_attention(q, k, v, True)),
    ("cross_entropy", [away((4, 10)), np_softmax(away((4, 10)))], lambda z, t: z.cross_entropy(t),
     lambda z, t: np.mean(np.sum(-t * np.log(np_softmax(z)), 1))),
    ("layer_norm", [away((3, 16))], lambda a: a.layer_norm(-1), lambda a: ln(a, -1)),
    ("rms_norm", [away((3, 16))], lambda a: a.rms_norm(-1), lambda a: a / np.sqrt((a ** 2).mean(-1, keepdims=True) + 1e-6)),
    ("group_norm", [away((2, 4, 3, 3))], lambda a: a.group_norm(2),
     lambda a: ln(a.reshape(2, 2, 18), -1).reshape(2, 4, 3, 3)),
]


def fd(fn, arrays, r, k, h=1e-5):
    g = np.zeros_like(arrays[k])
    for idx in np.ndindex(arrays[k].shape):
        plus = [a.copy() for a in arrays]
        minus = [a.copy() for a in arrays]
        plus[k][idx] += h
        minus[k][idx] -= h
        g[idx] = (np.sum(fn(*plus) * r) - np.sum(fn(*minus) * r)) / (2 * h)
    return g


def main():
    worst = 0.0
    for name, arrays, f_af, f_np in CASES:
        arrays = [np.asarray(a, np.float64) for a in arrays]
        ins = [af.input(a.shape, name=f"{name}_{i}") for i, a in enumerate(arrays)]
        out = f_af(*ins)
        r = rng.uniform(0.5, 1.5, out.shape)
        y = (out * af.constant(r)).sum() if out.shape else out * float(r)
        grads = af.grad(y, ins)
        prog = af.compile(*grads)
        declared = {n for n, _ in prog.inputs}
        got = prog(**{t.name: a for t, a in zip(ins, arrays) if t.name in declared})
        got = got if isinstance(got, tuple) else (got,)
        for k, g in enumerate(got):
            want = fd(f_np, arrays, r, k)
            err = float(np.linalg.norm(g - want) / max(np.linalg.norm(want), 1e-12))
            worst = max(worst, err)
            status = "ok" if err <= TOL else "FAIL"
            print(f"{name:18s} d/input{k}: relative error {err:.2e} {status}")
            assert err <= TOL, f"{name} gradient {k}: {err}"
    print(f"{len(CASES)} ops, worst relative error {worst:.2e} (tolerance {TOL})")


if __name__ == "__main__":
    main()
