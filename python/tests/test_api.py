"""API checks: a 128-op graph is one program and one dispatch; validate names the refused node
before compiling; compression off is byte-identical; bad input raises clear errors."""

import numpy as np

import anedvd.forge as af


def test_128_ops_one_program():
    af.reset()
    x = af.input((4, 64), name="x")
    y = x
    ops = 0
    for i in range(64):
        y = (y * 0.99).tanh() if i % 2 else (y + 0.01).sigmoid()
        ops += 2
    assert ops == 128
    prog = af.compile(y)
    assert prog.dispatches == 1
    assert prog.mil().count("func main") == 1
    xv = np.random.default_rng(0).normal(size=(4, 64))
    want = xv.copy()
    for i in range(64):
        want = np.tanh(want * 0.99) if i % 2 else 1 / (1 + np.exp(-(want + 0.01)))
    assert np.max(np.abs(prog(x=xv) - want)) < 1e-2
    print(f"128-op graph: {prog.statements} MIL statements, {prog.dispatches} dispatch")


def test_validate_names_the_node():
    af.reset()
    x = af.input((4, 32), name="x")
    y = (x * x + 1.0).log().named("the_log")
    try:
        af.validate(y, path="inmem")
    except ValueError as e:
        msg = str(e)
        assert "the_log" in msg and "ANE-OP" in msg, msg
        print("validate:", msg)
    else:
        raise AssertionError("log has no evidence on the inmem path")
    af.validate(y, path="e5rt")  # log is measured correct on e5rt


def test_compression_off_is_identical():
    af.reset()
    x = af.input((2, 16), name="x")
    w = af.param(np.random.default_rng(1).normal(size=(16, 16)), name="w")
    y = x @ w
    assert af.compile(y).mil() == af.compile(y, compress="fp16").mil()
    assert "constexpr_affine_dequantize" in af.compile(y, compress="int8").mil()
    assert "constexpr_lut_to_dense" in af.compile(y, compress="lut4").mil()


def test_errors_are_clear():
    af.reset()
    x = af.input((2, 3), name="x")
    for bad, needle in [
        (lambda: x @ x, "matmul"),
        (lambda: af.compile(x + 1.0)(x=np.ones((5, 5))), "x"),
        (lambda: af.compile(x + 1.0)(), "not supplied"),
        (lambda: af.input((2,), name="x"), "already used"),
        (lambda: af.param(np.array([np.nan])), "finite"),
        (lambda: af.input((1 << 20, 1 << 20)), "too large"),
        (lambda: af.compile(x + 1.0, compress="none"), "expected fp16"),
        (lambda: af.validate(x + 1.0, nonsense="x"), "unknown option"),
        (lambda: af.compile(x.log(), path="nowhere"), "inmem or e5rt"),
    ]:
        try:
            bad()
        except ValueError as e:
            assert needle in str(e), (needle, str(e))
        else:
            raise AssertionError(f"no error for {needle}")


def test_runtime_driver():
    af.reset()
    x = af.input((2, 64), name="x")
    y = ((x * 2.0 + 1.0).relu() * x)
    prog = af.compile(y, path="inmem")
    xv = np.linspace(-2, 2, 128).reshape(2, 64)
    loaded = prog.load("sim")
    assert "sim" in loaded.unit and "not the ANE" in loaded.unit
    assert np.array_equal(loaded(x=xv), prog(x=xv))
    # an e5rt program loads on the simulated e5rt driver
    e5rt = af.compile(y)
    on_e5rt = e5rt.load("sim")
    assert "e5rt-sim" in on_e5rt.unit and "not the ANE" in on_e5rt.unit
    assert np.array_equal(on_e5rt(x=xv), e5rt(x=xv))
    import sys
    if sys.platform != "darwin":
        try:
            prog.load("ane")
        except ValueError as e:
            assert "ANE unavailable" in str(e), str(e)
        else:
            raise AssertionError("no ANE here")


def test_capabilities():
    rows = af.capabilities()
    ops = {r["op"]: r for r in rows}
    assert ops["matmul"]["e5rt"].startswith("correct")
    assert ops["matmul"]["inmem"] == "contested"


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print(f"{name}: ok")
