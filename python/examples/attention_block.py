"""A pre-norm transformer block (RMS norm, 4-head causal attention, GELU MLP), one program,
checked against numpy in float64; then tuned, validated per path and compressed."""

import numpy as np

import anedvd.forge as af

S, D, H, F = 32, 64, 4, 128
rng = np.random.default_rng(4)
W = {n: rng.normal(0, 0.08, s) for n, s in
     dict(wq=(D, D), wk=(D, D), wv=(D, D), wo=(D, D), w1=(D, F), w2=(F, D)).items()}


def block_af(x, p):
    h = x.rms_norm(-1)
    def heads(t):
        return t.reshape(S, H, D // H).transpose(1, 0, 2)
    q, k, v = (heads(h @ p[n]) for n in ("wq", "wk", "wv"))
    a = af.attention(q, k, v, causal=True).transpose(1, 0, 2).reshape(S, D)
    x = x + a @ p["wo"]
    return x + (x.rms_norm(-1) @ p["w1"]).gelu() @ p["w2"]


def block_np(x):
    def rms(t):
        return t / np.sqrt((t ** 2).mean(-1, keepdims=True) + 1e-6)
    h = rms(x)
    def heads(t):
        return t.reshape(S, H, D // H).transpose(1, 0, 2)
    q, k, v = (heads(h @ W[n]) for n in ("wq", "wk", "wv"))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D // H) + np.where(np.tri(S) > 0, 0, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    x = x + (p @ v).transpose(1, 0, 2).reshape(S, D) @ W["wo"]
    u = rms(x) @ W["w1"]
    g = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
    return x + g @ W["w2"]


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    p = {n: af.param(v, name=n) for n, v in W.items()}
    x = af.input((S, D), name="x")
    y = block_af(x, p)
    xv = rng.normal(size=(S, D))
    want = block_np(xv)

    prog = af.compile(y)
    err = rel(prog(x=xv), want)
    print(f"block: {prog.statements} statements, {prog.dispatches} dispatch, relative error {err:.2e}")
    assert err < 2e-2

    options, report, _ = af.tune(y, allow_compression=True, tolerance=2e-2)
    for r in report:
        print("  tune candidate", {k: r[k] for k in ("softmax", "attention", "reduce", "matmul", "compress", "estimate_us", "error", "dropped")})
    print("tune picked", options)
    tuned = af.compile(y, **options)
    err_t = rel(tuned(x=xv), want)
    print(f"tuned: relative error {err_t:.2e}")
    assert err_t < 2e-2 + 1e-3

    for c in ("int8", "lut8"):
        e = rel(af.compile(y, compress=c)(x=xv), want)
        print(f"compress={c}: relative error {e:.2e}")
        assert e < 5e-2

    try:
        af.validate(y, path="inmem")
    except ValueError as e:
        print("inmem path refuses:", e)
    else:
        raise AssertionError("the in-memory path should refuse this block")


if __name__ == "__main__":
    main()
