"""A CG solve, a BiCGSTAB solve and 2-D FFTs, each one program, checked against numpy in float64.

CG: relative error <= 5e-3 at n = 48, condition number 10.
2-D FFT: relative error <= 2e-2 up to 64x64.
The op count of every program is independent of n (printed).
"""

import numpy as np

import anedvd.forge as af


def rel(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def spd(n, cond, rng):
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (q * np.linspace(1.0, cond, n)) @ q.T


def solvers():
    rng = np.random.default_rng(1)
    for n in (16, 48):
        a = spd(n, 10.0, rng)
        x_true = rng.normal(size=(n, 1))
        b = a @ x_true
        A, B = af.input((n, n), name=f"A{n}"), af.input((n, 1), name=f"b{n}")
        for name, node in (("cg", af.cg(A, B, 20)), ("bicgstab", af.bicgstab(A, B, 12))):
            prog = af.compile(node)
            x = prog(a, b)
            err = rel(x.astype(np.float64), np.linalg.solve(a, b))
            print(f"{name} n={n} cond=10: relative error {err:.2e} ({prog.statements} statements, {prog.dispatches} dispatch)")
            assert err <= 5e-3, f"{name} error {err}"
    # a nonsymmetric system for BiCGSTAB
    n = 48
    a = np.eye(n) * 4 + rng.normal(scale=0.3, size=(n, n))
    b = rng.normal(size=(n, 1))
    A, B = af.input((n, n), name="Ans"), af.input((n, 1), name="bns")
    x = af.compile(af.bicgstab(A, B, 12))(a, b)
    err = rel(x.astype(np.float64), np.linalg.solve(a, b))
    print(f"bicgstab nonsymmetric n={n}: relative error {err:.2e}")
    assert err <= 5e-3


def ffts():
    rng = np.random.default_rng(2)
    for n in (8, 16, 32, 64):
        re, im = af.input((n, n), name=f"re{n}"), af.input((n, n), name=f"im{n}")
        yr, yi = af.fft2(re, im)
        prog = af.compile(yr, yi)
        xr, xi = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))
        gr, gi = prog(xr, xi)
        want = np.fft.fft2(xr + 1j * xi)
        err = rel(gr + 1j * gi, want)
        print(f"fft2 {n}x{n}: relative error {err:.2e} ({prog.statements} statements)")
        assert err <= 2e-2, f"fft2 {n}: {err}"


if __name__ == "__main__":
    solvers()
    ffts()
